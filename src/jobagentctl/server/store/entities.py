"""``store.entities``: workspaces, API keys, agents and jobs, created, read, listed and deleted.
No lease logic here (``sql_store.py``): a job is created ``queued``."""

from __future__ import annotations

import os
import time
from typing import Any
from uuid import UUID, uuid4

from jobagentctl.errors import Conflict, NotFound
from jobagentctl.models import AgentState, Job, JobAgent, JobStatus
from jobagentctl.server.store import rows
from jobagentctl.server.store.connector import Connector, Row
from jobagentctl.server.store.cursors import decode_cursor, encode_cursor
from jobagentctl.server.store.records import ApiKeyRecord, WorkspaceRecord
from jobagentctl.server.store.validation import check_slug, slugify

__all__ = ["Entities", "new_job_id", "read_page"]


def new_job_id() -> UUID:
    """A new job's id, time-ordered (UUIDv7, RFC 9562). Its first 48 bits are the Unix time in
    milliseconds; then come the version, 74 random bits and the variant. Jobs created together sit
    together in every B-tree keyed by job id: job's, job_claim's and job_attempt's primary keys. So
    a claim, a completion or a reap touches recent index pages, however long the history grows. A
    random id touches one page anywhere in each index."""
    value = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80
    value |= int.from_bytes(os.urandom(10), "big") & ~(0xF << 76 | 0x3 << 62)
    return UUID(int=value | 0x7 << 76 | 0x2 << 62)


async def read_page(db: Connector, query: str, /, **params: Any) -> tuple[list[Row], int]:
    """A page of the listing ``query`` and how many rows match in all."""
    found = await db.all(query, **params)
    if found:
        return found, int(found[0]["total"])
    if params["offset"] == 0 and params.get("after_at") is None:
        return [], 0
    # Past the end: the window count needs one row to ride on.
    start = {"after_at": None, "after_key": None} if "after_at" in params else {}
    first = await db.all(query, **{**params, **start, "offset": 0, "limit": 1})
    return [], int(first[0]["total"]) if first else 0


class Entities:
    """The store's operations on workspaces, keys, agents and jobs (``store.entities``).

    Scopes, errors and the database clock are as ``SqlStore`` says.
    """

    def __init__(self, db: Connector) -> None:
        self.db = db

    # --- workspaces and keys -------------------------------------------------------------------

    async def create_workspace(self, name: str, slug: str | None = None) -> UUID:
        """A new workspace. ``slug`` None → derived from ``name`` (``slugify``), with ``-`` and
        8 characters of the id appended if taken. A given slug must be valid (``check_slug``:
        ``ValidationError``) and free (``Conflict``)."""
        workspace_id = uuid4()
        if slug is None:
            slug = slugify(name)
            if await self.get_workspace_by_slug(slug) is not None:
                slug = f"{slug[:41].strip('-')}-{workspace_id.hex[:8]}"
        try:
            await self.db.one("create_workspace", id=workspace_id, name=name, slug=check_slug(slug))
        except Conflict as exc:
            raise Conflict(f"a workspace with slug {slug!r} already exists") from exc
        return workspace_id

    async def workspace_exists(self, workspace_id: UUID) -> bool:
        """Whether the workspace of that id exists."""
        return await self.db.one("workspace_exists", id=workspace_id) is not None

    async def get_workspace(self, workspace_id: UUID) -> WorkspaceRecord | None:
        """The workspace of that id, or None."""
        row = await self.db.one("get_workspace", id=workspace_id)
        return None if row is None else rows.workspace_from_row(row)

    async def get_workspace_by_slug(self, slug: str) -> WorkspaceRecord | None:
        """The workspace of that slug (exact match), or None."""
        row = await self.db.one("get_workspace_by_slug", slug=slug)
        return None if row is None else rows.workspace_from_row(row)

    async def create_api_key(
        self, workspace_id: UUID, job_agent_id: UUID | None, prefix: str, secret_hash: str
    ) -> UUID:
        """A new key of the workspace (of one agent of it when ``job_agent_id`` is given): its
        id. A prefix in use → ``Conflict``; unknown workspace or agent → ``NotFound``."""
        key_id = uuid4()
        try:
            row = await self.db.one(
                "create_api_key",
                id=key_id,
                workspace_id=workspace_id,
                job_agent_id=job_agent_id,
                prefix=prefix,
                secret_hash=secret_hash,
            )
        except Conflict as exc:
            raise Conflict("an API key with this prefix already exists") from exc
        if row is None:
            raise NotFound("workspace or job agent not found")
        return key_id

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        """The key of that prefix (revoked ones too: the caller checks), or None."""
        row = await self.db.one("get_api_key", prefix=prefix)
        return None if row is None else rows.api_key_from_row(row)

    async def revoke_api_key(self, key_id: UUID) -> bool:
        """Revoke the key; False when there is no such key not yet revoked."""
        return await self.db.one("revoke_api_key", id=key_id) is not None

    async def api_key_revoked(self, key_id: UUID) -> bool | None:
        """Whether the key is revoked; None when there is no such key."""
        row = await self.db.one("api_key_revoked", id=key_id)
        return None if row is None else bool(row["revoked"])

    # --- agents --------------------------------------------------------------------------------

    async def upsert_agent(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        name: str,
        type: str,
        config: dict[str, Any],
        metadata: dict[str, Any] | None,
    ) -> JobAgent:
        """Create or replace. An id that exists in another workspace → ``NotFound``."""
        try:
            row = await self.db.one(
                "upsert_agent",
                id=agent_id,
                workspace_id=workspace_id,
                name=name,
                type=type,
                config=rows.dump_json(config),
                metadata=None if metadata is None else rows.dump_json(metadata),
            )
        except NotFound as exc:  # the foreign key: unknown workspace
            raise NotFound("workspace not found") from exc
        if row is None:
            raise NotFound("job agent not found")
        return rows.agent_from_row(row)

    async def get_agent(self, workspace_id: UUID, agent_id: UUID) -> JobAgent | None:
        """The agent of that id in the workspace, or None."""
        row = await self.db.one("get_agent", id=agent_id, workspace_id=workspace_id)
        return None if row is None else rows.agent_from_row(row)

    async def list_agents(
        self,
        workspace_id: UUID,
        limit: int,
        offset: int,
        *,
        presence_window: float = 90.0,
        state: AgentState | None = None,
    ) -> tuple[list[JobAgent], int]:
        """A page of the workspace's agents and how many (in ``state`` when given) it has in
        all, each with its presence: ``busy`` (a job of its in progress, or a revoked claim not
        let go), ``idle`` (seen within ``presence_window`` seconds), else ``offline``."""
        found, total = await read_page(
            self.db,
            "list_agents",
            workspace_id=workspace_id,
            limit=limit,
            offset=offset,
            window=presence_window,
            state=None if state is None else AgentState(state).value,
        )
        return [rows.agent_from_row(row) for row in found], total

    async def get_agent_presence(
        self, workspace_id: UUID, agent_id: UUID, presence_window: float
    ) -> JobAgent | None:
        """``get_agent`` with the agent's presence, as ``list_agents`` judges it."""
        row = await self.db.one(
            "get_agent_presence", id=agent_id, workspace_id=workspace_id, window=presence_window
        )
        return None if row is None else rows.agent_from_row(row)

    async def touch_agent(self, workspace_id: UUID, agent_id: UUID) -> None:
        """Record that the agent was seen now (nothing for an agent not of ``workspace_id``).
        One write: the caller throttles (``server/presence.py``)."""
        await self.db.one("touch_agent", agent_id=agent_id, workspace_id=workspace_id)

    async def agent_state_counts(self, presence_window: float) -> dict[str, int]:
        """For ``/metrics``: how many agents (every workspace) are in each state."""
        found = await self.db.all("agent_state_counts", window=presence_window)
        counts = dict.fromkeys((s.value for s in AgentState), 0)
        counts.update({str(row["state"]): int(row["agents"]) for row in found})
        return counts

    async def delete_agent(self, workspace_id: UUID, agent_id: UUID) -> bool:
        """Delete the agent and its keys; False when there was none. Its jobs stay, as in
        ctrlplane's V1 API: readable by id and in the workspace's lists with ``job_agent_id``
        None (``""`` on the wire). A claim row of one of them keeps the deleted agent's id. The
        reaper requeues it as any other. The job is then queued for no agent: nobody claims it until
        an operator acts."""
        return await self.db.one("delete_agent", id=agent_id, workspace_id=workspace_id) is not None

    # --- jobs ----------------------------------------------------------------------------------

    async def create_job(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        job_agent_config: dict[str, Any] | None,
        dispatch_context: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> Job:
        """Insert a ``queued`` job (``NotFound`` for an unknown agent) and wake long-polls of
        that agent (``NOTIFY`` on PostgreSQL, in-process event on SQLite). ``job_agent_config``
        defaults to the agent's config."""
        row = await self.db.one(
            "create_job",
            id=new_job_id(),
            agent_id=agent_id,
            workspace_id=workspace_id,
            job_agent_config=None if job_agent_config is None else rows.dump_json(job_agent_config),
            dispatch_context=rows.dump_json(dispatch_context or {}),
            metadata=rows.dump_json(metadata or {}),
        )
        if row is None:
            raise NotFound("job agent not found")
        self.db.notify(agent_id, 1)
        return rows.job_from_row(row)

    async def get_job(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> Job | None:
        """The job with ``dispatch_context`` filled, or None."""
        row = await self.db.one(
            "get_job", job_id=job_id, workspace_id=workspace_id, agent_scope=agent_scope
        )
        return None if row is None else rows.job_from_row(row)

    async def list_jobs(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        statuses: list[JobStatus] | None,
        include_dispatch_context: bool,
        limit: int,
        offset: int,
        cursor: str | None = None,
    ) -> tuple[list[Job], int, str | None]:
        """A page of jobs, newest first (``created_at DESC``, then the dialect's tie-breaker). Also
        how many match in all, and the cursor of the page after it (None: this is the last);
        ``agent_id`` None = every agent's, ``statuses`` None = any status. ``cursor`` (a
        page's next cursor) starts the page after that page's last job, ``offset`` rows on.
        """
        after_at, after_key = (
            (None, None) if cursor is None else decode_cursor(cursor, self.db.dialect)
        )
        found, total = await read_page(
            self.db,
            "list_jobs",
            workspace_id=workspace_id,
            agent_id=agent_id,
            statuses=None if statuses is None else [s.value for s in statuses],
            limit=limit + 1,  # one more: is there a page after this one?
            offset=offset,
            after_at=after_at,
            after_key=after_key,
        )
        page = found[:limit]
        following = None
        if len(found) > limit:
            following = encode_cursor(page[-1]["created_at"], page[-1]["list_key"])
        return [rows.job_from_row(row, include_dispatch_context) for row in page], total, following
