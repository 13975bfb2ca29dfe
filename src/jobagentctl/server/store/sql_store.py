"""``SqlStore``: every store operation written once, over a small ``Connector`` per database.

As procrastinate's ``manager.py`` over its connectors: the store names a query and passes
parameters; the connector (``sqlite.py``, ``postgres.py``) runs the dialect's SQL of that name
(``sql/<dialect>/queries.sql``, the same names in both) and translates driver errors. Where
PostgreSQL does an operation in one statement, SQLite's block of that name is a chain of
statements run in one write transaction (see ``SqliteConnector``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol
from uuid import UUID, uuid4

from jobagentctl.errors import (
    Conflict,
    JobAgentError,
    NotClaimable,
    NotFound,
    ValidationError,
)
from jobagentctl.models import (
    TERMINAL_STATUSES,
    ClaimedJob,
    ClaimState,
    Heartbeat,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
)
from jobagentctl.server.store._sql import (
    Row,
    StatusContext,
    Waiters,
    agent_from_row,
    api_key_from_row,
    attempt_from_row,
    attempt_outcome_for,
    check_lease,
    check_slug,
    claim_from_row,
    claimed_job_from_row,
    decide_status_change,
    dump_json,
    heartbeat_failure,
    heartbeat_from_row,
    id_list,
    job_from_row,
    merge_metadata,
    migrations,
    slugify,
    wait_event,
    workspace_from_row,
)
from jobagentctl.server.store.base import (
    ApiKeyRecord,
    OutageGrace,
    ReapResult,
    StatusChange,
    WorkspaceRecord,
)

__all__ = ["Connector", "Decide", "SqlStore"]


def _as_uuid(value: Any) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


Params = dict[str, Any]
# set_status's decision under the job's lock: the row read → the write to run, or None.
Decide = Callable[[Row | None], tuple[str, Params] | None]


class Connector(Protocol):
    """How the store talks to one database. Queries are named; rows are mappings."""

    dialect: str
    waiters: Waiters

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def migrate(self) -> list[int]:
        """Apply pending migrations in one transaction, serialised between processes."""

    async def one(self, name: str, params: Params | None = None) -> Row | None:
        """The first row of query ``name`` (every row is read: the statement is finished)."""

    async def all(self, name: str, params: Params | None = None) -> list[Row]: ...

    async def each(self, name: str, params: Callable[[], Params], limit: int) -> list[Row]:
        """Up to ``limit`` rows of the claim-like query ``name``, each job claimed once, in one
        statement (PostgreSQL: ``limit`` bound) or one transaction (SQLite: the chain run again
        with fresh ``params()`` until it answers none)."""

    async def locked(self, read: str, params: Params, decide: Decide) -> Row | None:
        """One transaction holding the job's lock (``lock_job``): run ``read``, pass its row to
        ``decide`` (which may raise: nothing is written), run the write it names; return the
        write's row, or the read's row when ``decide`` wrote nothing."""

    async def writable(self) -> bool:
        """False while the last write failed for a reason that fails every write (SQLite: disk
        full, I/O error, read-only file)."""

    def notify(self, agent_id: UUID, jobs: int) -> None:
        """``jobs`` jobs were queued for ``agent_id`` by a statement of this process."""


class SqlStore:
    """``Store`` over a ``Connector``; see ``base.Store`` for each method's contract."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self.dialect = connector.dialect
        self._db = connector

    async def _page(self, name: str, params: Params) -> tuple[list[Row], int]:
        rows = await self._db.all(name, params)
        if rows:
            return rows, int(rows[0]["total"])
        if params["offset"] == 0:
            return [], 0
        # Past the end: the window count needs one row to ride on.
        first = await self._db.all(name, {**params, "offset": 0, "limit": 1})
        return [], int(first[0]["total"]) if first else 0

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()
        self._db.waiters.notify_all()

    async def migrate(self) -> list[int]:
        return await self._db.migrate()

    async def schema_current(self, timeout: float | None = None) -> bool:
        try:
            async with asyncio.timeout(timeout):
                rows = await self._db.all("applied_versions")
                if not await self._db.writable():
                    return False
        except (JobAgentError, TimeoutError):
            return False
        done = {row["version"] for row in rows}
        return all(version in done for version, _ in migrations(self.dialect))

    # --- workspaces and keys -------------------------------------------------------------------

    async def create_workspace(self, name: str, slug: str | None = None) -> UUID:
        workspace_id = uuid4()
        if slug is None:
            slug = slugify(name)
            if await self.get_workspace_by_slug(slug) is not None:
                slug = f"{slug[:41].strip('-')}-{workspace_id.hex[:8]}"
        params = {"id": workspace_id, "name": name, "slug": check_slug(slug)}
        try:
            await self._db.one("create_workspace", params)
        except Conflict as exc:
            raise Conflict(f"a workspace with slug {slug!r} already exists") from exc
        return workspace_id

    async def workspace_exists(self, workspace_id: UUID) -> bool:
        return await self._db.one("workspace_exists", {"id": workspace_id}) is not None

    async def get_workspace(self, workspace_id: UUID) -> WorkspaceRecord | None:
        row = await self._db.one("get_workspace", {"id": workspace_id})
        return None if row is None else workspace_from_row(row)

    async def get_workspace_by_slug(self, slug: str) -> WorkspaceRecord | None:
        row = await self._db.one("get_workspace_by_slug", {"slug": slug})
        return None if row is None else workspace_from_row(row)

    async def create_api_key(
        self, workspace_id: UUID, job_agent_id: UUID | None, prefix: str, secret_hash: str
    ) -> UUID:
        key_id = uuid4()
        params = {
            "id": key_id,
            "workspace_id": workspace_id,
            "job_agent_id": job_agent_id,
            "prefix": prefix,
            "secret_hash": secret_hash,
        }
        try:
            row = await self._db.one("create_api_key", params)
        except Conflict as exc:
            raise Conflict("an API key with this prefix already exists") from exc
        if row is None:
            raise NotFound("workspace or job agent not found")
        return key_id

    async def get_api_key(self, prefix: str) -> ApiKeyRecord | None:
        row = await self._db.one("get_api_key", {"prefix": prefix})
        return None if row is None else api_key_from_row(row)

    async def revoke_api_key(self, key_id: UUID) -> bool:
        return await self._db.one("revoke_api_key", {"id": key_id}) is not None

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
        params = {
            "id": agent_id,
            "workspace_id": workspace_id,
            "name": name,
            "type": type,
            "config": dump_json(config),
            "metadata": None if metadata is None else dump_json(metadata),
        }
        try:
            row = await self._db.one("upsert_agent", params)
        except NotFound as exc:  # the foreign key: unknown workspace
            raise NotFound("workspace not found") from exc
        if row is None:
            raise NotFound("job agent not found")
        return agent_from_row(row)

    async def get_agent(self, workspace_id: UUID, agent_id: UUID) -> JobAgent | None:
        row = await self._db.one("get_agent", {"id": agent_id, "workspace_id": workspace_id})
        return None if row is None else agent_from_row(row)

    async def list_agents(
        self, workspace_id: UUID, limit: int, offset: int
    ) -> tuple[list[JobAgent], int]:
        params = {"workspace_id": workspace_id, "limit": limit, "offset": offset}
        rows, total = await self._page("list_agents", params)
        return [agent_from_row(row) for row in rows], total

    async def delete_agent(self, workspace_id: UUID, agent_id: UUID) -> bool:
        params = {"id": agent_id, "workspace_id": workspace_id}
        return await self._db.one("delete_agent", params) is not None

    # --- jobs ----------------------------------------------------------------------------------

    async def create_job(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        job_agent_config: dict[str, Any] | None,
        dispatch_context: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> Job:
        params = {
            "id": uuid4(),
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "job_agent_config": None if job_agent_config is None else dump_json(job_agent_config),
            "dispatch_context": dump_json(dispatch_context or {}),
            "metadata": dump_json(metadata or {}),
        }
        row = await self._db.one("create_job", params)
        if row is None:
            raise NotFound("job agent not found")
        self._db.notify(agent_id, 1)
        return job_from_row(row)

    async def get_job(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> Job | None:
        params = {"job_id": job_id, "workspace_id": workspace_id, "agent_scope": agent_scope}
        row = await self._db.one("get_job", params)
        return None if row is None else job_from_row(row)

    async def list_jobs(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        statuses: list[JobStatus] | None,
        include_dispatch_context: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Job], int]:
        params = {
            "workspace_id": workspace_id,
            "agent_id": agent_id,
            "statuses": None if statuses is None else [s.value for s in statuses],
            "limit": limit,
            "offset": offset,
        }
        rows, total = await self._page("list_jobs", params)
        return [job_from_row(row, include_dispatch_context) for row in rows], total

    # --- leases --------------------------------------------------------------------------------

    async def _claim(self, name: str, params: Callable[[], Params], limit: int) -> list[Row]:
        for retry in (True, False):
            try:
                return await self._db.each(name, params, limit)
            except Conflict:
                # A unique violation, which the invariants rule out (no claim row outlives
                # inProgress; the attempt number is counted on the job row under its lock):
                # one fresh statement, then the error.
                if not retry:
                    raise
        raise AssertionError("unreachable")

    async def claim_job(
        self, workspace_id: UUID, agent_id: UUID, job_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob:
        check_lease(lease_seconds)
        params = {
            "job_id": job_id,
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "lease_seconds": lease_seconds,
            "agent_scope": agent_id,
        }
        rows = await self._claim("claim_job", lambda: {**params, "new_claim_id": uuid4()}, 1)
        if rows:
            return claimed_job_from_row(rows[0])
        # Failure path only: tell unknown/foreign (404) from not queued (409).
        state = await self._db.one("job_claim_state", params)
        if state is None:
            raise NotFound("job not found")
        raise NotClaimable(
            f"the job is {state['status']}, not queued", details={"jobStatus": state["status"]}
        )

    async def claim_next(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob | None:
        jobs = await self.claim_batch(workspace_id, agent_id, lease_seconds, 1)
        return jobs[0] if jobs else None

    async def claim_batch(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None, limit: int
    ) -> list[ClaimedJob]:
        check_lease(lease_seconds)
        if limit < 1:
            raise ValidationError("limit must be at least 1")
        params = {
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "lease_seconds": lease_seconds,
        }
        # One job: the statement with LIMIT 1 written out (a plan PostgreSQL keeps, see
        # queries.sql); a batch: the one that binds the limit.
        query = "claim_next" if limit == 1 else "claim_batch"
        rows = await self._claim(query, lambda: {**params, "new_claim_id": uuid4()}, limit)
        return [claimed_job_from_row(row) for row in rows]

    async def wait_for_job(self, agent_id: UUID, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        waiters = self._db.waiters
        event = waiters.register(agent_id)
        consumed = False
        try:
            while True:
                # Checked after registering, so a job queued since the caller's claim attempt
                # (here, on another replica or another process on the SQLite file) is never
                # missed between that attempt and the signal.
                if await self._db.one("queued_exists", {"agent_id": agent_id}) is not None:
                    consumed = True
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                # Woken by this process's enqueues, LISTEN/NOTIFY or the connector's poller;
                # at the end the queue is asked once more (the caller's safety slice).
                if await wait_event(event, remaining):
                    consumed = True
                    return True
        finally:
            waiters.unregister(agent_id, event, consumed=consumed)

    async def heartbeat(
        self,
        workspace_id: UUID,
        job_id: UUID,
        claim_id: UUID | None,
        lease_seconds: int | None,
        agent_scope: UUID | None = None,
    ) -> Heartbeat:
        check_lease(lease_seconds)
        params = {
            "job_id": job_id,
            "workspace_id": workspace_id,
            "claim_id": claim_id,
            "lease_seconds": lease_seconds,
            "agent_scope": agent_scope,
        }
        row = await self._db.one("heartbeat", params)
        if row is not None:
            return heartbeat_from_row(row)
        # Failure path only: one more read to say why.
        raise heartbeat_failure(await self._db.one("job_claim_state", params))

    async def set_status(
        self,
        workspace_id: UUID,
        job_id: UUID,
        status: JobStatus,
        *,
        claim_id: UUID | None,
        message: str | None,
        external_id: str | None,
        metadata: dict[str, Any] | None,
        agent_scope: UUID | None = None,
        require_claim_id: bool = False,
    ) -> StatusChange:
        params = {
            "job_id": job_id,
            "workspace_id": workspace_id,
            "claim_id": claim_id,
            "agent_scope": agent_scope,
        }
        write = {
            "job_id": job_id,
            "status": status.value,
            "message": message,
            "external_id": external_id,
            # PostgreSQL merges the patch in SQL (jsonb ||); SQLite has no such operator and
            # writes the merged object computed here from the row read under the lock.
            "metadata": None if metadata is None else dump_json(metadata),
            "merged_metadata": None,
            "terminal": status in TERMINAL_STATUSES,
            "outcome": attempt_outcome_for(status).value,
        }
        if (
            claim_id is not None
            and status != JobStatus.IN_PROGRESS
            and (metadata is None or self.dialect == "postgres")
        ):
            # The common case, the claim's holder ending its attempt: one fenced statement.
            # Nothing comes back when it is refused or a repeat; the locked path says why.
            done = await self._db.one("finish_claimed", {**params, **write})
            if done is not None:
                return self._changed(done)
        wrote: list[bool] = []

        def decide(row: Row | None) -> tuple[str, Params] | None:
            if row is None:
                raise NotFound("job not found")
            verdict = decide_status_change(
                StatusContext.from_row(row),
                status,
                claim_id=claim_id,
                agent_scope=agent_scope,
                require_claim_id=require_claim_id,
            )
            if verdict == "noop":
                return None
            if metadata is not None:
                write["merged_metadata"] = dump_json(merge_metadata(row["metadata"], metadata))
            wrote.append(True)
            return "apply_status", write

        row = await self._db.locked("status_context", params, decide)
        if row is None:  # pragma: no cover - the job row was locked by us
            raise NotFound("job not found")
        return self._changed(row, wrote=bool(wrote))

    def _changed(self, row: Row, *, wrote: bool = True) -> StatusChange:
        agent = None if row["job_agent_id"] is None else _as_uuid(row["job_agent_id"])
        status = JobStatus(row["status"])
        if wrote and status == JobStatus.QUEUED and agent is not None:
            self._db.notify(agent, 1)
        return StatusChange(status, agent)

    async def reap(
        self, batch_size: int, max_reclaims: int, grace: OutageGrace | None = None
    ) -> ReapResult:
        params = {
            "batch_size": batch_size,
            "max_reclaims": max_reclaims,
            # No outage: nothing expired "since the outage began", nobody is spared.
            "outage_began_ago": 0.0 if grace is None else grace.began_ago,
            "outage_ended_ago": 1e9 if grace is None else grace.ended_ago,
        }
        requeued = failed = 0
        while True:
            row = await self._db.one("reap", params)
            if row is None or not row["reaped"]:
                break
            requeued += int(row["requeued"])
            failed += int(row["failed"])
            woken: dict[UUID, int] = {}
            for agent in id_list(row["requeued_agents"]):
                woken[agent] = woken.get(agent, 0) + 1
            for agent, jobs in woken.items():
                self._db.notify(agent, jobs)
            if int(row["considered"]) < batch_size:
                # Fewer expired claims than a batch could lock: another statement would find
                # nothing (one held by a status change or another reaper: next tick). A batch
                # whose jobs were partly held (PostgreSQL) was full: go on.
                break
        return ReapResult(requeued=requeued, failed=failed)

    async def list_claims(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        state: str,
        limit: int,
        offset: int,
    ) -> tuple[list[JobClaim], int]:
        try:
            wanted = ClaimState(state)
        except ValueError:
            names = ", ".join(sorted(ClaimState))
            raise ValidationError(f"state must be one of {names}") from None
        params = {
            "workspace_id": workspace_id,
            "agent_id": agent_id,
            "state": wanted.value,
            "limit": limit,
            "offset": offset,
        }
        rows, total = await self._page("list_claims", params)
        return [claim_from_row(row) for row in rows], total

    async def list_attempts(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> list[JobAttempt]:
        params = {"job_id": job_id, "workspace_id": workspace_id, "agent_scope": agent_scope}
        rows = await self._db.all("list_attempts", params)
        if not rows:
            raise NotFound("job not found")
        return [attempt_from_row(row) for row in rows if row["attempt"] is not None]

    async def claim_stats(self) -> dict[str, float]:
        row = await self._db.one("claim_stats")
        return {key: float(value or 0) for key, value in (row or {}).items()}
