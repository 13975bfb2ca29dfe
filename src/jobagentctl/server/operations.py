"""The operations both HTTP paths call, for the hot routes.

The framework routes (``app.py``) and the fast path (``fastpath.py``) answer the hot endpoints
through the same functions below, so they answer the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field, StrictFloat
from starlette.types import Receive

from jobagentctl.models import (
    ClaimNextRequest,
    ClaimRequest,
    HeartbeatRequest,
    JobStatus,
    RequestModel,
    UpdateJobStatusRequest,
    WireModel,
)
from jobagentctl.routes import Routes
from jobagentctl.server.auth import Principal
from jobagentctl.server.encoding import accepted_bytes, claimed_jobs_bytes, job_bytes, model_bytes
from jobagentctl.server.service import JobService

__all__ = [
    "HOT_ROUTES",
    "HotRoute",
    "JobWaitRequest",
    "JobWaitResult",
    "Result",
    "claim_job_op",
    "claim_next_op",
    "heartbeat_op",
    "job_wait_op",
    "update_status_op",
]

Result = tuple[int, bytes]


class JobWaitRequest(RequestModel):
    """Body of the cancellation long-poll (issue 12 §6)."""

    claim_id: UUID
    wait_seconds: StrictFloat = Field(default=0.0, ge=0)


class JobWaitResult(WireModel):
    """``claimHeld`` false: the claim ended (completed, cancelled, released, reaped)."""

    job_id: UUID
    status: JobStatus
    claim_held: bool


async def _watching_disconnect(
    receive: Receive | None, call: Callable[[asyncio.Event | None], Awaitable[Any]]
) -> Any:
    """``call(disconnected)`` while a watcher sets ``disconnected`` when the client leaves
    (``receive`` after the body has been read); without ``receive``, ``call(None)``."""
    if receive is None:
        return await call(None)
    disconnected = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected.set()

    watcher = asyncio.ensure_future(watch())
    try:
        return await call(disconnected)
    finally:
        watcher.cancel()
        # The watcher only observes; whatever ended it must not change the answer.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher


async def job_wait_op(
    service: JobService,
    principal: Principal,
    ws: UUID,
    job_id: UUID,
    body: JobWaitRequest,
    receive: Receive | None = None,
) -> Result:
    status, held = await _watching_disconnect(
        receive,
        lambda disconnected: service.wait_claim(
            principal, ws, job_id, body.claim_id, body.wait_seconds, disconnected
        ),
    )
    return 200, model_bytes(JobWaitResult(job_id=job_id, status=status, claim_held=held))


# --- the hot operations ---------------------------------------------------------------------------


async def claim_job_op(
    service: JobService,
    principal: Principal,
    ws: UUID,
    agent_id: UUID,
    job_id: UUID,
    body: ClaimRequest | None,
) -> Result:
    job = await service.claim_job(principal, ws, agent_id, job_id, body)
    return 200, job_bytes(job, True)


async def claim_next_op(
    service: JobService,
    principal: Principal,
    ws: UUID,
    agent_id: UUID,
    body: ClaimNextRequest | None,
    receive: Receive | None = None,
) -> Result:
    """Claim-next. A long-poll also watches the connection (``receive``, after the body has
    been read): a job queued after the client has gone away is not claimed for nobody (it would
    sit leased until its lease ran out)."""
    if receive is None or body is None or not body.wait_seconds:
        jobs = await service.claim_next(principal, ws, agent_id, body)
    else:
        jobs = await _watching_disconnect(
            receive,
            lambda disconnected: service.claim_next(principal, ws, agent_id, body, disconnected),
        )
    if not jobs:
        return 204, b""
    if body is not None and body.limit is not None:
        return 200, claimed_jobs_bytes(jobs)
    return 200, job_bytes(jobs[0], True)


async def heartbeat_op(
    service: JobService, principal: Principal, ws: UUID, job_id: UUID, body: HeartbeatRequest | None
) -> Result:
    beat = await service.heartbeat(principal, ws, job_id, body)
    return 200, model_bytes(beat)


async def update_status_op(
    service: JobService,
    principal: Principal,
    ws: UUID,
    job_id: UUID,
    body: UpdateJobStatusRequest,
) -> Result:
    accepted = await service.update_status(principal, ws, job_id, body)
    return 202, accepted_bytes(accepted)


# --- the hot routes, as the fast path serves them -----------------------------------------------

HotCall = Callable[[JobService, Principal, list[UUID], Any, Receive], Awaitable[Result]]


@dataclass(frozen=True, slots=True)
class HotRoute:
    method: str
    template: str
    model: type[BaseModel]
    body_required: bool
    call: HotCall


HOT_ROUTES: tuple[HotRoute, ...] = (
    HotRoute(
        "POST",
        Routes.CLAIM_NEXT,
        ClaimNextRequest,
        False,
        lambda s, p, ids, body, receive: claim_next_op(s, p, ids[0], ids[1], body, receive),
    ),
    HotRoute(
        "POST",
        Routes.CLAIM,
        ClaimRequest,
        False,
        lambda s, p, ids, body, receive: claim_job_op(s, p, ids[0], ids[1], ids[2], body),
    ),
    HotRoute(
        "POST",
        Routes.HEARTBEAT,
        HeartbeatRequest,
        False,
        lambda s, p, ids, body, receive: heartbeat_op(s, p, ids[0], ids[1], body),
    ),
    HotRoute(
        "PUT",
        Routes.JOB_STATUS,
        UpdateJobStatusRequest,
        True,
        lambda s, p, ids, body, receive: update_status_op(s, p, ids[0], ids[1], body),
    ),
)
