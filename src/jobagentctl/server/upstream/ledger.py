"""The gateway's own rows: its mirror of the jobs it claims and its outbox (``upstream_op``).

Each operation is one named statement of ``sql/<dialect>/upstream.sql`` (the ``gateway_*``
ones): one transaction each, with the database clock, as every store operation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from jobagentctl.errors import JobAgentError
from jobagentctl.server.store import Store
from jobagentctl.server.store.connector import Row
from jobagentctl.server.store.fencing import heartbeat_failure

__all__ = ["Ledger", "Op", "Report"]

# Seconds an outbox row taken by one process is left to it before another may take it, by
# default (``ServerSettings.upstream_hold``: more than a request to ctrlplane may take).
OP_HOLD_SECONDS = 21.0


@dataclass(frozen=True)
class Op:
    """One outbox row: what the gateway is about to do (or retry) upstream."""

    id: UUID
    workspace_id: UUID
    job_id: UUID
    kind: str  # report | requeue
    claim_id: UUID
    payload: dict[str, Any]
    tries: int


@dataclass(frozen=True)
class Report:
    """An accepted report: its outbox row, and whether it was delivered already."""

    op_id: UUID
    payload: dict[str, Any]
    delivered: bool


def _uuid(value: Any) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    loaded = json.loads(value) if value else {}
    return loaded if isinstance(loaded, dict) else {}


def _epoch(value: datetime) -> float:
    return value.timestamp()


def _parse_time(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    return datetime.now(UTC)


class Ledger:
    """The gateway's statements over the store's connector."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._db = store.db

    async def register(self, workspace_id: UUID, upstream_url: str) -> None:
        await self._db.one("gateway_register", workspace_id=workspace_id, upstream_url=upstream_url)

    async def workspaces(self) -> list[tuple[UUID, str]]:
        rows = await self._db.all("gateway_workspaces")
        return [(_uuid(row["workspace_id"]), str(row["upstream_url"])) for row in rows]

    async def create_workspace(self, workspace_id: UUID, name: str, slug: str) -> None:
        """Our workspace row under ctrlplane's id (the store's own creation draws a new id)."""
        await self._db.one("create_workspace", id=workspace_id, name=name, slug=slug)

    async def mirror_agent(self, workspace_id: UUID, agent: dict[str, Any]) -> None:
        """Our row of ctrlplane's agent ``agent`` (as ctrlplane answers it), made or refreshed."""
        await self.store.entities.upsert_agent(
            workspace_id,
            UUID(str(agent["id"])),
            str(agent.get("name") or "agent"),
            str(agent.get("type") or "http-pull"),
            dict(agent.get("config") or {}),
            dict(agent.get("metadata") or {}),
        )

    async def mirror(
        self,
        workspace_id: UUID,
        agent_id: UUID,
        job_id: UUID,
        job: dict[str, Any],
        *,
        confirmed: bool = False,
    ) -> bool:
        """Our row of ``job_id``, a job ctrlplane lists as queued (``job``, as it sent it).

        False when it is not claimable:

        - we hold it in progress, or have an undelivered operation on it;
        - or it ended here and ``confirmed`` is not given. ``confirmed``: ctrlplane said queued when
          asked for this job alone.
        """
        row = await self._db.one(
            "gateway_mirror_job",
            id=job_id,
            workspace_id=workspace_id,
            agent_id=agent_id,
            created_at=_epoch(_parse_time(job.get("createdAt"))),
            job_agent_config=json.dumps(dict(job.get("jobAgentConfig") or {})),
            dispatch_context=json.dumps(dict(job.get("dispatchContext") or {})),
            metadata=json.dumps(dict(job.get("metadata") or {})),
            confirmed=confirmed,
        )
        return row is not None

    async def ended_here(self, workspace_id: UUID, job_id: UUID) -> datetime | None:
        """When our row of the job says it ended (a terminal status), or None."""
        job = await self.store.entities.get_job(workspace_id, job_id, None)
        return None if job is None else job.completed_at

    async def undo_claim(self, job_id: UUID, claim_id: UUID) -> bool:
        return (
            await self._db.one("gateway_undo_claim", job_id=job_id, claim_id=claim_id) is not None
        )

    async def accept_report(
        self,
        workspace_id: UUID,
        job_id: UUID,
        claim_id: UUID,
        agent_scope: UUID | None,
        payload: dict[str, Any],
        *,
        hold: float = OP_HOLD_SECONDS,
    ) -> Report:
        """Fence the report and write it to the outbox (the claim marked delivering), in one
        transaction; or find it written before (a repeat). The fencing errors of a heartbeat
        otherwise: ``ClaimLost``/``ClaimMismatch`` with ``details.jobStatus``, ``NotFound``."""
        params = {
            "op_id": uuid4(),
            "workspace_id": workspace_id,
            "job_id": job_id,
            "claim_id": claim_id,
            "agent_scope": agent_scope,
            "payload": json.dumps(payload),
            "hold": hold,
        }
        row = await self._db.one("gateway_accept_report", **params)
        if row is None or row.get("op_id") is None:
            row = await self._db.one("gateway_report_op", **params)
        if row is None:
            raise self._refusal(await self._db.one("job_claim_state", **params))
        return Report(
            op_id=_uuid(row["op_id"]),
            payload=_json(row["op_payload"]),
            delivered=row["op_done"] is not None,
        )

    @staticmethod
    def _refusal(state: Row | None) -> JobAgentError:
        return heartbeat_failure(state)

    async def take_ops(self, limit: int, *, hold: float = OP_HOLD_SECONDS) -> list[Op]:
        rows = await self._db.all("gateway_take_ops", limit=limit, hold=hold)
        return [
            Op(
                id=_uuid(row["id"]),
                workspace_id=_uuid(row["workspace_id"]),
                job_id=_uuid(row["job_id"]),
                kind=str(row["kind"]),
                claim_id=_uuid(row["claim_id"]),
                payload=_json(row["payload"]),
                tries=int(row["tries"]),
            )
            for row in rows
        ]

    async def op_done(self, op_id: UUID, error: str | None = None) -> None:
        await self._db.one("gateway_op_done", id=op_id, error=error)

    async def op_retry(self, op_id: UUID, delay: float, error: str) -> None:
        await self._db.one("gateway_op_retry", id=op_id, delay=delay, error=error)

    async def expired_claims(self, limit: int) -> list[tuple[UUID, UUID, UUID]]:
        """``(job, claim, workspace)`` of expired claims that are not delivering a report."""
        rows = await self._db.all("gateway_expired_claims", limit=limit)
        return [(_uuid(r["job_id"]), _uuid(r["claim_id"]), _uuid(r["workspace_id"])) for r in rows]

    async def expire_claim(self, workspace_id: UUID, job_id: UUID, claim_id: UUID) -> bool:
        """Reap that claim if it is still expired and not delivering: the attempt ends
        ``expired``, the requeue goes to the outbox (one transaction). False when it was
        revived, reported or reaped meanwhile."""
        row = await self._db.one(
            "gateway_expire_claim",
            workspace_id=workspace_id,
            job_id=job_id,
            claim_id=claim_id,
            op_id=uuid4(),
        )
        return row is not None

    async def live_claims(self, min_age: float) -> list[tuple[UUID, UUID, UUID, UUID]]:
        """``(job, agent, claim, workspace)`` of claims not delivering, older than ``min_age``."""
        rows = await self._db.all("gateway_live_claims", min_age=min_age)
        return [
            (
                _uuid(r["job_id"]),
                _uuid(r["job_agent_id"]),
                _uuid(r["claim_id"]),
                _uuid(r["workspace_id"]),
            )
            for r in rows
        ]

    async def pending_ops(self, workspace_id: UUID) -> list[dict[str, Any]]:
        rows = await self._db.all("gateway_pending_ops", workspace_id=workspace_id)
        return [dict(row) for row in rows]

    async def revoked_held(self, job_id: UUID) -> bool:
        """Whether a claim an operator revoked (requeue) still holds the job (its holder has
        not let go and its lease has not run out)."""
        return await self._db.one("gateway_revoked_held", job_id=job_id) is not None

    async def claim_of(self, job_id: UUID) -> UUID | None:
        row = await self._db.one("gateway_claim_of", job_id=job_id)
        return None if row is None else _uuid(row["claim_id"])

    async def add_requeue(self, workspace_id: UUID, job_id: UUID, claim_id: UUID) -> None:
        """An operator's requeue of a held claim: sent to ctrlplane once the holder let go."""
        await self._db.one(
            "gateway_add_requeue",
            op_id=uuid4(),
            workspace_id=workspace_id,
            job_id=job_id,
            claim_id=claim_id,
        )
