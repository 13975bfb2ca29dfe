"""Shared set-up of the store tests: a workspace with two agents on the ``store`` fixture, and
extra store instances on the same database (separate connections: real concurrency)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import pytest

from jobagentctl.models import Job
from jobagentctl.server.store import Store, open_store


@dataclass
class Env:
    store: Store
    url: str
    ws: UUID
    agent: UUID
    other_agent: UUID

    async def job(self, agent: UUID | None = None, **fields: Any) -> Job:
        return await self.store.create_job(
            self.ws,
            agent or self.agent,
            fields.get("job_agent_config"),
            fields.get("dispatch_context"),
            fields.get("metadata"),
        )


@pytest.fixture
async def env(store: Store, database_url: str) -> Env:
    ws = await store.create_workspace("ws")
    agent = await store.upsert_agent(ws, uuid4(), "agent", "shell", {"k": "v"}, None)
    other = await store.upsert_agent(ws, uuid4(), "other", "shell", {}, None)
    return Env(store, database_url, ws, agent.id, other.id)


@asynccontextmanager
async def stores(url: str, count: int, **options: Any) -> AsyncIterator[list[Store]]:
    """``count`` more opened stores on ``url`` (as if ``count`` server processes)."""
    if url.startswith("postgres"):
        options = {"min_size": 1, "max_size": 2, "listen": False, **options}
    opened: list[Store] = []
    try:
        for _ in range(count):
            extra = open_store(url, **options)
            await extra.open()
            opened.append(extra)
        yield opened
    finally:
        for extra in opened:
            await extra.close()
