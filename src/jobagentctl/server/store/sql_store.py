"""``SqlStore``: every store operation written once, with its contract, over one ``Connector``
per database (``connector.py``).

The lifecycle and lease operations live here. ``store.entities`` (``entities.py``) holds those
on workspaces, keys, agents and jobs. ``store.logs`` (``logs.py``) holds those on job logs.

As procrastinate's ``manager.py`` over its connectors, the store names a query and passes
parameters. The connector (``sqlite.py``, ``postgres.py``) runs the dialect's SQL of that name
and translates driver errors. That SQL is in ``sql/<dialect>/*.sql``, the same names in both.
Where PostgreSQL does an operation in one statement, SQLite's block of that name is a chain of
statements run in one write transaction (see ``SqliteConnector``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any
from uuid import UUID, uuid4

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    Conflict,
    JobAgentError,
    NotClaimable,
    NotFound,
    ServerUnavailable,
    ValidationError,
)
from jobagentctl.models import (
    HEARTBEAT_INTERVAL_MAX,
    HEARTBEAT_INTERVAL_MIN,
    TERMINAL_STATUSES,
    ClaimedJob,
    JobAttempt,
    JobClaim,
    JobStatus,
)
from jobagentctl.server.store import rows
from jobagentctl.server.store.connector import Connector, Params, Row
from jobagentctl.server.store.entities import Entities, read_page
from jobagentctl.server.store.fencing import (
    StatusContext,
    attempt_outcome_for,
    decide_status_change,
    heartbeat_failure,
)
from jobagentctl.server.store.logs import LogStore
from jobagentctl.server.store.queries import migrations
from jobagentctl.server.store.records import (
    HeartbeatRecord,
    OutageGrace,
    ReapResult,
    StatusChange,
)
from jobagentctl.server.store.schema_window import SchemaWindow
from jobagentctl.server.store.validation import check_claim_state, check_lease
from jobagentctl.server.store.waiters import Mark

__all__ = ["SqlStore", "Store"]


class SqlStore:
    """Persistence and lease logic. All operations are coroutines; all times are the database's.

    Every lease decision happens inside the database, with the database clock, in one statement
    or one transaction. The service above only clamps lease lengths, checks scopes and maps
    results to HTTP. Operations raise the project's errors (``NotFound``, ``NotClaimable``,
    ``ClaimLost``, ``ClaimMismatch``, ``ValidationError``, ``Conflict``; ``ServerUnavailable``
    when the database is down), never a driver's. ``agent_scope``: when not None the caller
    holds an agent key; a job of another agent is then ``NotFound`` (never reveal existence).
    ``workspace_id`` always scopes: an id of another workspace is ``NotFound``.
    """

    def __init__(self, db: Connector) -> None:
        # The one connector: the entities and the logs hold it too.
        self.db = db
        self.dialect = db.dialect  # for reports: "sqlite" | "postgres"
        self.entities = Entities(db)
        self.logs = LogStore(db)

    # --- lifecycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect (pool / connection). Does not migrate."""
        await self.db.open()

    async def close(self) -> None:
        """Disconnect; every long-poll still waiting returns."""
        await self.db.close()
        self.db.waiters.notify_all()

    async def migrate(self) -> list[int]:
        """Apply pending versioned migrations (idempotent, safe when replicas race); return the
        versions applied now. ``SchemaTooNew`` when the database is past this release's window
        (a newer release applied a migration that is not expand-only)."""
        applied = await self.db.migrate()
        (await self.schema_window()).check()
        return applied

    async def schema_window(self) -> SchemaWindow:
        """The applied versions as this release sees them (newer than it knows, and how)."""
        applied = await self.db.all("applied_versions")
        return SchemaWindow.of(applied, known=len(migrations(self.dialect)))

    async def schema_current(self, timeout: float | None = None) -> bool:
        """True when :meth:`readiness` finds nothing wrong."""
        return await self.readiness(timeout) is None

    async def readiness(self, timeout: float | None = None) -> JobAgentError | None:
        """None when the store is ready (``/readyz``), else the error to answer with, never raised.

        Ready: the database is reachable, every migration is applied, no newer one is outside
        this release's window, and writes work. The errors:

        - ``ServerUnavailable``: unreachable, or no answer within ``timeout`` seconds. None is
          the store's own bound, PostgreSQL's ``statement_timeout``.
        - ``ServerUnavailable``: migrations pending.
        - ``ServerUnavailable``: the last write failed for a reason that fails every write
          (SQLite disk full, I/O error, read-only). It is probed again with a write that changes
          nothing visible.
        - ``SchemaTooNew``.
        """
        try:
            async with asyncio.timeout(timeout):
                applied = await self.db.all("applied_versions")
                writable = await self.db.writable()
        except TimeoutError:
            return ServerUnavailable("database unreachable: no answer in time")
        except JobAgentError as exc:  # its message says where and why (never a password)
            return ServerUnavailable(f"database unavailable: {exc.message}")
        done = {row["version"] for row in applied}
        pending = [version for version, _ in migrations(self.dialect) if version not in done]
        if pending:
            return ServerUnavailable(f"migrations pending: {', '.join(map(str, pending))}")
        if not writable:
            return ServerUnavailable("database writes fail (disk full, I/O error, read-only)")
        return SchemaWindow.of(applied, known=len(migrations(self.dialect))).problem()

    # --- leases --------------------------------------------------------------------------------

    async def _claim(self, query: str, limit: int, /, **params: Any) -> list[Row]:
        for retry in (True, False):
            try:
                return await self.db.each(query, limit, _new_claim, **params)
            except Conflict:
                # A unique violation, which the invariants rule out (no claim row outlives
                # inProgress; the attempt number is counted on the job row under its lock):
                # one fresh statement, then the error.
                if not retry:
                    raise
        raise AssertionError("unreachable")

    async def claim_job(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        job_id: UUID,
        lease_seconds: int | None,
        *,
        agent_lease: tuple[int, int] | None = None,
    ) -> ClaimedJob:
        """Claim that job atomically:

        - ``queued → inProgress``, ``started_at = now``;
        - the attempt counted on the job (previous + 1);
        - when the claim is leased, a ``job_claim`` row with a fresh ``claim_id`` expiring at
          ``now + lease``. The attempt's ``job_attempt`` row is written when it ends; an
          unleased claim opens it now.

        ``lease_seconds`` is already resolved and clamped by the service; None = unleased.
        With ``agent_lease`` = the bounds ``(min, max)``, the lease is instead the agent's
        ``config.leaseSeconds`` clamped into them (``service.resolve_lease``'s rule). The claim
        statement reads it itself; an agent that configures none gets an unleased claim. The
        granted lease is the answer's ``lease_seconds``.

        Unknown job, or another agent's → ``NotFound``; not queued → ``NotClaimable`` with
        ``details.jobStatus``.
        """
        check_lease(lease_seconds)
        low, high = agent_lease or (1, 1)
        params = {
            "job_id": job_id,
            "agent_id": agent_id,
            "workspace_id": workspace_id,
            "lease_seconds": lease_seconds,
            "agent_lease": agent_lease is not None,
            "lease_min": low,
            "lease_max": high,
            "agent_scope": agent_id,
        }
        claimed = await self._claim("claim_job", 1, **params)
        if claimed:
            return rows.claimed_job_from_row(claimed[0])
        # Failure path only: tell unknown/foreign (404) from not queued (409).
        state = await self.db.one("job_claim_state", **params)
        if state is None:
            raise NotFound("job not found")
        if state["status"] == JobStatus.QUEUED and state["revoked_held"]:
            raise NotClaimable(
                "the job is queued, but the agent of its previous attempt has not let go of its "
                "revoked claim yet (claimable once it does, or its lease runs out)",
                details={"jobStatus": state["status"], "claimHeld": True},
            )
        raise NotClaimable(
            f"the job is {state['status']}, not queued", details={"jobStatus": state["status"]}
        )

    async def claim_next(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None
    ) -> ClaimedJob | None:
        """``claim_batch`` of one: the job, or None when nothing is queued."""
        jobs = await self.claim_batch(workspace_id, agent_id, lease_seconds, 1)
        return jobs[0] if jobs else None

    async def claim_batch(
        self, workspace_id: UUID, agent_id: UUID, lease_seconds: int | None, limit: int
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` of the agent's oldest queued jobs, oldest first.

        The order is ``created_at ASC, id ASC``. PostgreSQL claims them in one statement with
        ``FOR UPDATE SKIP LOCKED``, SQLite in one transaction. Each is claimed as ``claim_job``
        does, with its own claim id and lease. [] when nothing is queued.
        """
        check_lease(lease_seconds)
        if limit < 1:
            raise ValidationError("limit must be at least 1")
        # One job: the statement with LIMIT 1 written out (a plan PostgreSQL keeps, see
        # leases.sql); a batch: the one that binds the limit.
        query = "claim_next" if limit == 1 else "claim_batch"
        claimed = await self._claim(
            query, limit, agent_id=agent_id, workspace_id=workspace_id, lease_seconds=lease_seconds
        )
        return [rows.claimed_job_from_row(row) for row in claimed]

    def wait_mark(self, agent_id: UUID) -> Mark:
        """Taken before a claim attempt, for :meth:`wait_for_job`'s ``since``."""
        return self.db.waiters.mark(agent_id)

    async def wait_for_job(
        self, agent_id: UUID, timeout: float, *, since: Mark | None = None, last: bool = False
    ) -> bool:
        """Block up to ``timeout`` seconds for a "job queued for this agent" signal (created,
        released, requeued by the reaper; from any replica on PostgreSQL). True if signalled.
        May wake spuriously; the caller re-tries its claim. ``since`` and ``last``: see
        ``Waiters.wait`` (they spare the queue checks an empty long-poll need not make)."""

        async def queued() -> bool:
            return await self.db.one("queued_exists", agent_id=agent_id) is not None

        return await self.db.waiters.wait(agent_id, timeout, queued, since=since, last=last)

    async def heartbeat(
        self,
        workspace_id: UUID,
        job_id: UUID,
        claim_id: UUID | None,
        lease_seconds: int | None,
        agent_scope: UUID | None = None,
        last_output_at: datetime | None = None,
    ) -> HeartbeatRecord:
        """Touch ``job_claim`` only: ``claim_expires_at = now + lease`` (and ``lease_seconds``
        when a new value is given; ``last_output_at``, never later than now, when one is given:
        the same row write). An expired row not yet reaped is revived. No claim row →
        ``ClaimLost`` with ``details.jobStatus``; ``claim_id`` given and not the current one →
        ``ClaimMismatch`` (``details.jobStatus``, ``details.attempt``); unknown job → ``NotFound``.
        """
        check_lease(lease_seconds)
        params = {
            "job_id": job_id,
            "workspace_id": workspace_id,
            "claim_id": claim_id,
            "lease_seconds": lease_seconds,
            "agent_scope": agent_scope,
            "last_output_at": _epoch(last_output_at),
        }
        row = await self.db.one("heartbeat", **params)
        if row is not None:
            return rows.heartbeat_from_row(row)
        # Failure path only: one more read to say why.
        raise heartbeat_failure(await self.db.one("job_claim_state", **params))

    # Ten arguments: the change (status, message, external id, metadata) and its fence (claim
    # id, agent scope, require-claim-id, force). Not yet grouped into two records: that moves
    # five callers and the store's conformance tests (a follow-up of issue 32).
    async def set_status(  # noqa: PLR0913
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
        force: bool = False,
    ) -> StatusChange:
        """Set a status, fenced by ``claim_id``, atomically; answers the job's status and agent
        (the wire's ``{id, message}`` needs no job: read it with ``get_job``).

        - ``claim_id`` of the current claim → apply. Its holder ending the attempt (any status
          but ``inProgress``) is one statement. Why it was refused is read only when that
          statement changed nothing.
        - No claim id (and no ``force``), and no claim row holds the job → one statement too.
          A job with a claim row, or a repeat, is decided by the locked path after it.
        - ``claim_id`` given, no claim row, the attempt of that ``claim_id`` ended
          ``completed``/``cancelled`` and the job already has ``status`` → idempotent success.
        - ``claim_id`` given, another attempt holds the claim → ``ClaimMismatch``; no claim row
          otherwise → ``ClaimLost`` (``details.jobStatus``). Nothing changes.
        - no ``claim_id`` (V1, as ctrlplane): any transition. A failed or cancelled job can be
          queued again; its next claim is attempt N+1. Two exceptions: the same terminal status
          again (idempotent success), and ``require_claim_id`` with ``agent_scope`` on a job
          with a claim row (``ValidationError``).

        Leaving ``inProgress`` deletes the claim row and ends the attempt (its row written
        then, from the claim row; an unleased attempt's open row closed): ``completed`` for a
        terminal status, ``cancelled`` for ``cancelled``, else ``released``. ``queued`` wakes
        long-polls; ``inProgress`` sets ``started_at`` (as a claim does: the latest attempt's);
        a terminal status sets ``completed_at``, any other clears it. ``message`` and
        ``external_id`` replace when given; ``metadata`` is merged key by key.

        A claim row ended without its claim id (an operator's requeue or cancel) is kept as
        revoked. The job is not claimable while it is, until one of these:

        - its holder reports with that claim id. That is refused or answered as a repeat as
          above, but the job stops waiting: its command is gone.
        - its lease runs out (``reap``);
        - a status change with ``force``, which also drops one kept earlier.
        """
        fence = dict(
            job_id=job_id, workspace_id=workspace_id, claim_id=claim_id, agent_scope=agent_scope
        )
        write = _status_write(job_id, status, message, external_id, metadata)
        write["force"] = force
        write["revoke"] = claim_id is None and not force
        if (
            claim_id is not None
            and status != JobStatus.IN_PROGRESS
            and (metadata is None or self.db.merges_json)
        ):
            # The common case, the claim's holder ending its attempt: one fenced statement.
            # Nothing comes back when it is refused or a repeat; the locked path says why.
            done = await self.db.one("finish_claimed", **{**fence, **write})
            if done is not None:
                return self._changed(done)
        elif claim_id is None and not force and (metadata is None or self.db.merges_json):
            # No claim id on a job that no claim row holds (a V1 agent's report on its
            # unleased claim, an operator's change): one statement too. Nothing comes back for
            # a claim row, a repeat or a job changed meanwhile; the locked path decides.
            done = await self.db.one("finish_unclaimed", **{**fence, **write})
            if done is not None:
                return self._changed(done)
        rules = partial(
            decide_status_change,
            status=status,
            claim_id=claim_id,
            agent_scope=agent_scope,
            require_claim_id=require_claim_id,
        )
        return await self._set_status_locked(fence, write, metadata, rules)

    async def _set_status_locked(
        self,
        fence: Params,
        write: Params,
        metadata: dict[str, Any] | None,
        rules: Callable[[StatusContext], str],
    ) -> StatusChange:
        """``set_status`` in one transaction holding the job's lock: read, decide, write.

        A claim id refused there, or answered as a repeat, may be a revoked claim's. Its holder
        reports that its command has ended, so the job stops waiting for it, whatever the
        attempt's outcome. Say an operator ended it with ``skipped`` (outcome ``completed``),
        then requeued it. The holder's release is then answered as a repeat: the job must not
        wait for the lease for nothing.
        """
        wrote = let_go = False

        def decide(row: Row | None) -> tuple[str, Params] | None:
            nonlocal wrote, let_go
            if row is None:
                raise NotFound("job not found")
            try:
                decision = rules(rows.status_context_from_row(row))
            except (ClaimLost, ClaimMismatch):
                let_go = True
                raise
            let_go = decision == "noop"
            if let_go:
                return None
            if metadata is not None:
                # The object merged here from the row read under the lock, written whole
                # where the database cannot merge it (see Connector.merges_json).
                write["merged_metadata"] = rows.dump_json(
                    rows.merge_metadata(row["metadata"], metadata)
                )
            wrote = True
            return "apply_status", write

        try:
            row = await self.db.locked("status_context", decide, **fence)
            if row is None:  # pragma: no cover - the job row was locked by us
                raise NotFound("job not found")
            return self._changed(row, wrote=wrote)
        finally:
            if let_go and fence["claim_id"] is not None:
                freed = await self.db.one("release_revoked", **fence)
                if freed is not None:
                    self._changed(freed)

    def _changed(self, row: Row, *, wrote: bool = True) -> StatusChange:
        change = rows.status_change_from_row(row)
        if wrote and change.status == JobStatus.QUEUED and change.job_agent_id is not None:
            self.db.notify(change.job_agent_id, 1)
        return change

    async def reap(
        self, batch_size: int, max_reclaims: int, grace: OutageGrace | None = None
    ) -> ReapResult:
        """Reap expired claims, one batched statement at a time.

        The statement takes ≤ ``batch_size`` rows (``SKIP LOCKED`` on PostgreSQL). It is
        repeated while one finds an expired claim beyond its batch. For each expired claim:

        - its ``job_claim`` row is deleted, its attempt closed ``expired``;
        - its job goes from ``inProgress`` to ``queued``;
        - or to ``failure`` with message ``lease expired N times``, when ``max_reclaims`` > 0
          and this is the N-th expiry with N ≥ ``max_reclaims``.

        Safe with concurrent reapers:
        each job exactly once. Wakes long-polls of the agents whose jobs went back to the queue.
        ``grace``: a claim that expired less than ``began_ago`` seconds ago is spared while
        ``ended_ago`` is below its heartbeat interval (``models.heartbeat_interval``), see
        ``reaper.py``."""
        params = {
            "batch_size": batch_size,
            "max_reclaims": max_reclaims,
            # No outage: nothing expired "since the outage began", nobody is spared.
            "outage_began_ago": 0.0 if grace is None else grace.began_ago,
            "outage_ended_ago": 1e9 if grace is None else grace.ended_ago,
            "heartbeat_min": HEARTBEAT_INTERVAL_MIN,
            "heartbeat_max": HEARTBEAT_INTERVAL_MAX,
        }
        # Revoked claims past their lease no longer hold their jobs back.
        freed = await self.db.one("reap_revoked")
        for agent, jobs in Counter(rows.id_list((freed or {}).get("queued_agents"))).items():
            self.db.notify(agent, jobs)
        requeued = failed = 0
        while True:
            row = await self.db.one("reap", **params)
            if row is None or not row["reaped"]:
                break
            requeued += int(row["requeued"])
            failed += int(row["failed"])
            for agent, jobs in Counter(rows.id_list(row["requeued_agents"])).items():
                self.db.notify(agent, jobs)
            if not row["more"]:
                # No expired claim beyond this batch: another statement would find nothing
                # (one held by a status change or another reaper: next tick). A batch whose
                # jobs were partly held (PostgreSQL) still says whether there is more.
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
        """A page of claims, oldest first, and how many match in all. ``state`` ∈
        active|expired|unleased|all, judged with the database clock; ``unleased`` rows are
        ``inProgress`` jobs without a claim row. ``last_heartbeat_at`` = ``claim_expires_at -
        lease_seconds``."""
        found, total = await read_page(
            self.db,
            "list_claims",
            workspace_id=workspace_id,
            agent_id=agent_id,
            state=check_claim_state(state).value,
            stale_after=None,
            quiet_after=None,
            limit=limit,
            offset=offset,
        )
        return [rows.claim_from_row(row) for row in found], total

    async def urgent_claims(
        self,
        workspace_id: UUID,
        *,
        agent_id: UUID | None,
        state: str,
        stale_after: float | None,
        limit: int,
        quiet_after: float | None = None,
    ) -> tuple[list[JobClaim], dict[str, int]]:
        """The ``limit`` most urgent claims of :meth:`list_claims`, and the count of each mark.

        All is judged with the database clock. The order:

        - expired, longest overdue first;
        - then unleased, or active but silent for longer than ``stale_after`` seconds, or with
          no output for longer than ``quiet_after``;
        - then the rest by nearest expiry.

        A mark is a state, ``stale`` or ``quiet``.
        """
        params = {
            "workspace_id": workspace_id,
            "agent_id": agent_id,
            "state": check_claim_state(state).value,
            "stale_after": stale_after,
            "quiet_after": quiet_after,
        }
        found = await self.db.all("urgent_claims", **params, limit=limit)
        counted = await self.db.all("claim_counts", **params)
        counts = {str(row["mark"]): int(row["n"]) for row in counted}
        return [rows.claim_from_row(row) for row in found], counts

    async def list_attempts(
        self, workspace_id: UUID, job_id: UUID, agent_scope: UUID | None = None
    ) -> list[JobAttempt]:
        """Attempts of one job, attempt ascending; ``NotFound`` for an unknown job."""
        found = await self.db.all(
            "list_attempts", job_id=job_id, workspace_id=workspace_id, agent_scope=agent_scope
        )
        if not found:
            raise NotFound("job not found")
        return [rows.attempt_from_row(row) for row in found if row["attempt"] is not None]

    async def claim_stats(self) -> dict[str, float]:
        """For ``/metrics``: ``active``, ``expired`` claim counts and ``oldest_age_seconds``."""
        row = await self.db.one("claim_stats")
        return {key: float(value or 0) for key, value in (row or {}).items()}


def _new_claim() -> Params:
    """What each claimed row gets fresh: its claim id."""
    return {"new_claim_id": uuid4()}


def _status_write(
    job_id: UUID,
    status: JobStatus,
    message: str | None,
    external_id: str | None,
    metadata: dict[str, Any] | None,
) -> Params:
    """The parameters of the status writes (``finish_claimed``, ``apply_status``)."""
    return {
        "job_id": job_id,
        "status": status.value,
        "message": message,
        "external_id": external_id,
        "metadata": None if metadata is None else rows.dump_json(metadata),
        "merged_metadata": None,  # where the database cannot merge: see _set_status_locked
        "terminal": status in TERMINAL_STATUSES,
        "outcome": attempt_outcome_for(status).value,
    }


# The name the server's modules annotate with: there is one store, over either connector.
Store = SqlStore


def _epoch(value: datetime | None) -> float | None:
    """Unix seconds of ``value`` (a naive time taken as UTC), as both dialects take a time
    from the agent."""
    if value is None:
        return None
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()
