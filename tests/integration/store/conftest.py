"""Shared set-up of the store tests: a workspace with two agents on the ``store`` fixture, extra
store instances on the same database (separate connections: real concurrency), and the store's
calls with their optional arguments left out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest

from jobagentctl.models import Job, JobStatus
from jobagentctl.server.store import StatusChange, Store, open_store


async def set_status(
    store: Store, ws: UUID, job_id: UUID, status: JobStatus, **fields: Any
) -> StatusChange:
    """``store.set_status`` with ``claim_id``, ``message``, ``external_id`` and ``metadata``
    None unless given."""
    given = {"claim_id": None, "message": None, "external_id": None, "metadata": None, **fields}
    return await store.set_status(ws, job_id, status, **given)


async def list_jobs(store: Store, ws: UUID, **fields: Any) -> tuple[list[Job], int]:
    """``store.entities.list_jobs``'s jobs and total: every agent, every status, no dispatch
    context, the first 50, unless given."""
    given = {
        "agent_id": None,
        "statuses": None,
        "include_dispatch_context": False,
        "limit": 50,
        "offset": 0,
        **fields,
    }
    jobs, total, _ = await store.entities.list_jobs(ws, **given)
    return jobs, total


@dataclass
class Env:
    store: Store
    url: str
    ws: UUID
    agent: UUID
    other_agent: UUID

    async def job(self, agent: UUID | None = None, **fields: Any) -> Job:
        return await self.store.entities.create_job(
            self.ws,
            agent or self.agent,
            fields.get("job_agent_config"),
            fields.get("dispatch_context"),
            fields.get("metadata"),
        )

    async def status(self, job_id: UUID, status: JobStatus, **fields: Any) -> Job:
        """``set_status`` on the job, then the job as stored."""
        await set_status(self.store, self.ws, job_id, status, **fields)
        changed = await self.store.entities.get_job(self.ws, job_id)
        assert changed is not None
        return changed


@pytest.fixture
async def env(store: Store, database_url: str) -> Env:
    ws = await store.entities.create_workspace("ws")
    agent = await store.entities.upsert_agent(ws, uuid4(), "agent", "shell", {"k": "v"}, None)
    other = await store.entities.upsert_agent(ws, uuid4(), "other", "shell", {}, None)
    return Env(store, database_url, ws, agent.id, other.id)


@asynccontextmanager
async def opened(url: str, **options: Any) -> AsyncIterator[Store]:
    """A store on ``url`` opened (not migrated), closed afterwards."""
    store = open_store(url, **options)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def stores(url: str, count: int, **options: Any) -> AsyncIterator[list[Store]]:
    """``count`` more opened stores on ``url`` (as if ``count`` server processes)."""
    if url.startswith("postgres"):
        options = {"min_size": 1, "max_size": 2, "listen": False, **options}
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(opened(url, **options)) for _ in range(count)]
