"""Fixtures of the server tests: the app in-process over httpx's ASGI transport, on a real store.

``api`` gives an :class:`Api` bound to a fresh database (``database_url``: SQLite and PostgreSQL),
a workspace and its key. The reaper does not run (``reap_interval=0``) unless a test starts the
app's lifespan; tests call ``api.reap()`` to sweep deterministically.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from jobagentctl.server.app import create_app
from jobagentctl.server.auth import generate_key
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import open_store
from jobagentctl.server.store.base import ReapResult, Store
from tests.fixtures.databases import expire_claims
from tests.fixtures.live_server import LiveServer
from tests.fixtures.waiting import await_until

# Settings of in-process tests: 1 s leases allowed, no background reaper, no key cache.
TEST_SETTINGS: dict[str, Any] = {
    "database": "sqlite:///unused.db",
    "min_lease_seconds": 1,
    "reap_interval": 0,
    "key_cache_seconds": 0,
}


@dataclass
class Api:
    """An httpx client on the app plus shortcuts; ``ws`` is the key's workspace."""

    client: httpx.AsyncClient
    store: Store
    app: Any
    settings: ServerSettings
    workspace_id: str
    api_key: str
    database_url: str
    _extra: list[httpx.AsyncClient] = field(default_factory=list)

    def path(self, rest: str, ws: str | None = None) -> str:
        return f"/api/v1/workspaces/{ws or self.workspace_id}/{rest}"

    async def call(
        self,
        method: str,
        rest: str,
        body: Any = None,
        *,
        key: str | None = None,
        ws: str | None = None,
        params: Any = None,
    ) -> httpx.Response:
        headers = {"X-API-Key": key if key is not None else self.api_key}
        kwargs: dict[str, Any] = {"headers": headers, "params": params}
        if body is not None:
            kwargs["json"] = body
        return await self.client.request(method, self.path(rest, ws), **kwargs)

    async def agent(self, name: str = "agent", config: dict[str, Any] | None = None) -> str:
        agent_id = str(uuid.uuid4())
        r = await self.call(
            "PUT", f"job-agents/{agent_id}", {"name": name, "type": "shell", "config": config or {}}
        )
        assert r.status_code == 202, r.text
        return agent_id

    async def enqueue(self, agent_id: str, **body: Any) -> dict[str, Any]:
        r = await self.call("POST", f"job-agents/{agent_id}/jobs", body)
        assert r.status_code == 201, r.text
        job: dict[str, Any] = r.json()
        return job

    async def claim(
        self, agent_id: str, job_id: str, body: Any = None, *, key: str | None = None
    ) -> httpx.Response:
        return await self.call("POST", f"job-agents/{agent_id}/jobs/{job_id}/claim", body, key=key)

    async def claim_next(
        self, agent_id: str, body: Any = None, *, key: str | None = None
    ) -> httpx.Response:
        return await self.call("POST", f"job-agents/{agent_id}/claim", body, key=key)

    async def heartbeat(
        self, job_id: str, body: Any = None, *, key: str | None = None
    ) -> httpx.Response:
        return await self.call("POST", f"jobs/{job_id}/heartbeat", body, key=key)

    async def status(
        self, job_id: str, body: dict[str, Any], *, key: str | None = None
    ) -> httpx.Response:
        return await self.call("PUT", f"jobs/{job_id}/status", body, key=key)

    async def job(self, job_id: str) -> dict[str, Any]:
        r = await self.call("GET", f"jobs/{job_id}")
        assert r.status_code == 200, r.text
        job: dict[str, Any] = r.json()
        return job

    async def attempts(self, job_id: str) -> list[dict[str, Any]]:
        r = await self.call("GET", f"jobs/{job_id}/attempts")
        assert r.status_code == 200, r.text
        attempts: list[dict[str, Any]] = r.json()
        return attempts

    async def claims(self, **params: Any) -> list[dict[str, Any]]:
        r = await self.call("GET", "job-claims", params=params)
        assert r.status_code == 200, r.text
        items: list[dict[str, Any]] = r.json()["items"]
        return items

    async def new_key(self, agent_id: str | None = None, ws: str | None = None) -> str:
        key = generate_key()
        await self.store.create_api_key(
            uuid.UUID(ws or self.workspace_id),
            uuid.UUID(agent_id) if agent_id else None,
            key.prefix,
            key.secret_hash,
        )
        return key.value

    async def reap(self) -> ReapResult:
        return await self.store.reap(self.settings.reap_batch_size, self.settings.max_reclaims)

    async def expire(self, *job_ids: str) -> None:
        """Make these claims lapse now (the tests-only way: the database clock cannot move)."""
        expired = await asyncio.to_thread(expire_claims, self.database_url, list(job_ids))
        assert expired == len(job_ids)


def server_metrics(server: LiveServer) -> str:
    status, text = server.request("GET", "/metrics", api_key=None)
    return str(text) if status == 200 else ""


async def make_api(
    database_url: str, *, store_options: dict[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[Api]:
    """An ``Api`` on an opened, migrated store (``store_options`` go to ``open_store``, the
    other keywords are ``ServerSettings``); closes everything afterwards. On PostgreSQL the
    store's LISTEN connection is up before the test starts, so a long-poll is woken from the
    first notification on, not polled."""
    settings = ServerSettings(**{**TEST_SETTINGS, "database": database_url, **overrides})
    store = open_store(database_url, **(store_options or {}))
    await store.open()
    try:
        connector = getattr(store, "connector", None)
        if hasattr(connector, "listening") and (store_options or {}).get("listen", True):
            await await_until(lambda: connector.listening, what="the store's LISTEN connection")
        await store.migrate()
        workspace = await store.create_workspace("test")
        key = generate_key()
        await store.create_api_key(workspace, None, key.prefix, key.secret_hash)
        app = create_app(settings, store=store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Api(
                client=client,
                store=store,
                app=app,
                settings=settings,
                workspace_id=str(workspace),
                api_key=key.value,
                database_url=database_url,
            )
    finally:
        await store.close()


# ``async with open_api(url, **settings) as api:`` — the same, as a context manager.
open_api = asynccontextmanager(make_api)


@pytest.fixture
async def api(database_url: str, anyio_backend: str) -> AsyncIterator[Api]:
    async for value in make_api(database_url):
        yield value
