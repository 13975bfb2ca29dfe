"""Every endpoint of the API under /api/v1, written once: its declaration and its operation.

An operation takes the :class:`Call` (the service, who calls, the connection) and the route's
parameters. Those are its path ids in template order, then query parameters and body, annotated
as FastAPI reads them. It answers the body's bytes, sent with the route's status (no bytes: 204
No Content).

Both HTTP paths call these same functions, so they answer the same bytes:

- the framework, through one route per entry of :data:`ENDPOINTS` (``routing.py``);
- the fast path, for the entries marked ``hot`` (``fastpath.py``).

Each is declared by :func:`endpoint`. Its docstring's first paragraph is the route's OpenAPI
summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar
from uuid import UUID

from fastapi import Body, Path, Query
from pydantic import BaseModel
from starlette.types import Receive

from jobagentctl.models import (
    SLUG_PATTERN,
    AcceptedResponse,
    AgentState,
    ClaimedJob,
    ClaimedJobs,
    ClaimNextRequest,
    ClaimRequest,
    ClaimState,
    CreateJobRequest,
    ErrorBody,
    Heartbeat,
    HeartbeatRequest,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
    JobWait,
    JobWaitRequest,
    LogAppendRequest,
    LogAppendResult,
    LogPage,
    Page,
    UpdateJobStatusRequest,
    UpsertJobAgentRequest,
    UrgentClaims,
    Workspace,
)
from jobagentctl.routes import Routes
from jobagentctl.server.http.auth import Principal
from jobagentctl.server.http.encoding import (
    Result,
    accepted_bytes,
    claimed_jobs_bytes,
    job_bytes,
    job_page_bytes,
    list_bytes,
    model_bytes,
    page_bytes,
)
from jobagentctl.server.http.openapi import CONFLICTS, ERRORS
from jobagentctl.server.service import JobService

__all__ = ["ENDPOINTS", "Call", "Endpoint", "Operation", "endpoint"]

T = TypeVar("T")

WsPath = Annotated[UUID, Path(alias="ws", description="Workspace id")]
AgentPath = Annotated[UUID, Path(alias="agentId", description="Job agent id")]
JobPath = Annotated[UUID, Path(alias="jobId", description="Job id")]
# The slugs a workspace can have: anything else is a 400, never a lookup.
SlugPath = Annotated[str, Path(pattern=f"^{SLUG_PATTERN}$", description="Workspace slug")]
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size, 1–1000")]
Offset = Annotated[int, Query(ge=0, le=2**63 - 1, description="Items to skip")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=200,
        description="A page's nextCursor: the page after it (counting offset from there)",
    ),
]
StatusFilter = Annotated[
    list[JobStatus] | None, Query(alias="status", description="Only jobs with this status")
]


def _mark_after(alias: str, description: str) -> Any:
    """A query parameter: the seconds after which an active claim earns a mark."""
    return Query(alias=alias, ge=0, le=10**9, description=description)


StaleAfter = Annotated[
    float | None,
    _mark_after("staleAfter", "Seconds without a heartbeat that make an active claim stale"),
]
QuietAfter = Annotated[
    float | None,
    _mark_after("quietAfter", "Seconds without output that make an active (not stale) claim quiet"),
]


@dataclass(frozen=True, slots=True)
class Call:
    """One request as an operation sees it. ``receive`` is the connection after the body was
    read: a long-poll watches it to notice the client leaving."""

    service: JobService
    principal: Principal
    receive: Receive | None = None


Operation = Callable[..., Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One route: method, path template, operation, its status, and what the OpenAPI document
    says of it."""

    method: str
    template: str
    operation: Operation
    response_model: Any
    tag: str
    status: int
    responses: dict[int | str, dict[str, Any]]
    hot: bool

    @property
    def summary(self) -> str:
        """The OpenAPI summary: the first paragraph of the operation's docstring."""
        doc = inspect.getdoc(self.operation) or ""
        return " ".join(doc.split("\n\n", 1)[0].split())

    @property
    def parameters(self) -> list[inspect.Parameter]:
        """The operation's parameters after the ``Call``: what a route takes from the request."""
        return list(inspect.signature(self.operation, eval_str=True).parameters.values())[1:]

    def body(self) -> tuple[type[BaseModel], bool]:
        """The model of the operation's ``body`` parameter, and whether a body is required."""
        body = next(p for p in self.parameters if p.name == "body")
        model = body.annotation
        if typing.get_origin(model) is typing.Annotated:
            model = typing.get_args(model)[0]
        if isinstance(model, types.UnionType):  # Model | None
            model = next(arg for arg in typing.get_args(model) if arg is not type(None))
        return model, body.default is inspect.Parameter.empty

    def answer(self, content: bytes) -> Result:
        """The operation's bytes with the route's status; no bytes: 204 No Content."""
        return (self.status, content) if content else (204, b"")


# In declaration order, which is the routing order.
ENDPOINTS: list[Endpoint] = []


def endpoint(
    method: str,
    template: str,
    response_model: Any,
    *,
    tag: str,
    status: int = 200,
    responses: dict[int | str, dict[str, Any]] = ERRORS,
    hot: bool = False,
) -> Callable[[Operation], Operation]:
    """Declare the decorated operation as the route ``method template`` (``hot``: served by
    the fast path too)."""

    def declare(operation: Operation) -> Operation:
        ENDPOINTS.append(
            Endpoint(method, template, operation, response_model, tag, status, responses, hot)
        )
        return operation

    return declare


async def _until_gone(
    receive: Receive | None, work: Callable[[asyncio.Event | None], Awaitable[T]]
) -> T:
    """``work(disconnected)`` while a watcher sets ``disconnected`` when the client leaves;
    without ``receive``, ``work(None)``."""
    if receive is None:
        return await work(None)
    disconnected = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected.set()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work(disconnected)
    finally:
        watcher.cancel()
        # The watcher only observes; whatever ended it must not change the answer.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher


# --- job agents -----------------------------------------------------------------------------


# --- workspaces: first, so that "slug" is not taken for a {ws} id ------------------------------


@endpoint("GET", Routes.WORKSPACE_BY_SLUG, Workspace, tag="workspaces")
async def get_workspace_by_slug(call: Call, slug: SlugPath) -> bytes:
    """Resolve a workspace slug to the workspace (ctrlplane's getWorkspaceBySlug)"""
    record = await call.service.workspace_by_slug(call.principal, slug)
    out = Workspace(id=record.id, name=record.name, slug=record.slug, created_at=record.created_at)
    return model_bytes(out)


@endpoint("PUT", Routes.AGENT, AcceptedResponse, tag="job agents", status=202)
async def upsert_job_agent(
    call: Call, ws: WsPath, agent_id: AgentPath, body: UpsertJobAgentRequest
) -> bytes:
    """Create or replace a job agent"""
    accepted = await call.service.upsert_agent(call.principal, ws, agent_id, body)
    return accepted_bytes(accepted)


@endpoint("GET", Routes.AGENTS, Page[JobAgent], tag="job agents")
async def list_job_agents(
    call: Call,
    ws: WsPath,
    limit: Limit = 50,
    offset: Offset = 0,
    state: Annotated[AgentState | None, Query(description="Only agents in this state")] = None,
) -> bytes:
    """List job agents, with their presence (busy, idle, offline)"""
    agents, total = await call.service.list_agents(call.principal, ws, limit, offset, state)
    return page_bytes(agents, total, limit, offset)


@endpoint("GET", Routes.AGENT, JobAgent, tag="job agents")
async def get_job_agent(call: Call, ws: WsPath, agent_id: AgentPath) -> bytes:
    """Get a job agent"""
    return model_bytes(await call.service.get_agent(call.principal, ws, agent_id))


@endpoint("DELETE", Routes.AGENT, AcceptedResponse, tag="job agents", status=202)
async def delete_job_agent(call: Call, ws: WsPath, agent_id: AgentPath) -> bytes:
    """Delete a job agent"""
    return accepted_bytes(await call.service.delete_agent(call.principal, ws, agent_id))


# --- jobs, and the V1 claim -------------------------------------------------------------------


@endpoint("GET", Routes.AGENT_JOBS, Page[Job], tag="jobs")
async def list_agent_jobs(
    call: Call,
    ws: WsPath,
    agent_id: AgentPath,
    status: StatusFilter = None,
    include_dispatch_context: Annotated[bool, Query(alias="includeDispatchContext")] = False,
    limit: Limit = 50,
    offset: Offset = 0,
    cursor: Cursor = None,
) -> bytes:
    """List the agent's jobs, newest first"""
    jobs, total, following = await call.service.list_agent_jobs(
        call.principal,
        ws,
        agent_id,
        statuses=status,
        include_dispatch_context=include_dispatch_context,
        limit=limit,
        offset=offset,
        cursor=cursor,
    )
    return job_page_bytes(
        jobs,
        total,
        limit,
        offset,
        include_dispatch_context=include_dispatch_context,
        next_cursor=following,
    )


@endpoint("POST", Routes.CLAIM, ClaimedJob, tag="leases", responses=CONFLICTS, hot=True)
async def claim_job(
    call: Call,
    ws: WsPath,
    agent_id: AgentPath,
    job_id: JobPath,
    body: Annotated[ClaimRequest | None, Body()] = None,
) -> bytes:
    """Claim a queued job (a lease only when asked for or configured)"""
    job = await call.service.claim_job(call.principal, ws, agent_id, job_id, body)
    return job_bytes(job, True)


@endpoint("GET", Routes.JOBS, Page[Job], tag="jobs")
async def list_jobs(
    call: Call,
    ws: WsPath,
    status: StatusFilter = None,
    limit: Limit = 50,
    offset: Offset = 0,
    cursor: Cursor = None,
) -> bytes:
    """List the workspace's jobs, newest first"""
    jobs, total, following = await call.service.list_jobs(
        call.principal, ws, statuses=status, limit=limit, offset=offset, cursor=cursor
    )
    return job_page_bytes(
        jobs, total, limit, offset, include_dispatch_context=False, next_cursor=following
    )


@endpoint("GET", Routes.JOB, Job, tag="jobs")
async def get_job(call: Call, ws: WsPath, job_id: JobPath) -> bytes:
    """Get a job, with its dispatch context"""
    return job_bytes(await call.service.get_job(call.principal, ws, job_id), True)


@endpoint(
    "PUT",
    Routes.JOB_STATUS,
    AcceptedResponse,
    tag="leases",
    status=202,
    responses=CONFLICTS,
    hot=True,
)
async def update_job_status(
    call: Call, ws: WsPath, job_id: JobPath, body: UpdateJobStatusRequest
) -> bytes:
    """Set a job's status, fenced by claimId (with claimNext: and claim the next jobs)"""
    accepted = await call.service.update_status(call.principal, ws, job_id, body)
    return accepted_bytes(accepted)


# --- the lease additions ----------------------------------------------------------------------

_NO_JOB: dict[int | str, dict[str, Any]] = {
    204: {"description": "No job queued within waitSeconds"}
}


@endpoint(
    "POST",
    Routes.CLAIM_NEXT,
    ClaimedJob | ClaimedJobs,
    tag="leases",
    responses={**ERRORS, **_NO_JOB},
    hot=True,
)
async def claim_next_job(
    call: Call,
    ws: WsPath,
    agent_id: AgentPath,
    body: Annotated[ClaimNextRequest | None, Body()] = None,
) -> bytes:
    """Claim the agent's oldest queued job (its `limit` oldest: {items}), long-polling up to
    waitSeconds

    A long-poll also watches the connection. A job queued after the client has gone away is not
    claimed for nobody: it would sit leased until its lease ran out.
    """
    service, principal = call.service, call.principal
    if body is None or not body.wait_seconds:
        jobs = await service.claim_next(principal, ws, agent_id, body)
    else:
        jobs = await _until_gone(
            call.receive,
            lambda disconnected: service.claim_next(principal, ws, agent_id, body, disconnected),
        )
    if not jobs:
        return b""
    if body is not None and body.limit is not None:
        return claimed_jobs_bytes(jobs)
    return job_bytes(jobs[0], True)


@endpoint("POST", Routes.HEARTBEAT, Heartbeat, tag="leases", responses=CONFLICTS, hot=True)
async def heartbeat(
    call: Call,
    ws: WsPath,
    job_id: JobPath,
    body: Annotated[HeartbeatRequest | None, Body()] = None,
) -> bytes:
    """Extend the claim's lease"""
    return model_bytes(await call.service.heartbeat(call.principal, ws, job_id, body))


@endpoint("POST", Routes.JOB_WAIT, JobWait, tag="leases")
async def wait_for_job_claim(
    call: Call, ws: WsPath, job_id: JobPath, body: JobWaitRequest
) -> bytes:
    """Wait until the claim is no longer held (cancelled, released, reaped, completed) or
    waitSeconds run out (claimHeld true)"""
    status, held = await _until_gone(
        call.receive,
        lambda disconnected: call.service.wait_claim(
            call.principal, ws, job_id, body.claim_id, body.wait_seconds, disconnected
        ),
    )
    return model_bytes(JobWait(job_id=job_id, status=status, claim_held=held))


@endpoint("GET", Routes.CLAIMS, Page[JobClaim], tag="leases")
async def list_job_claims(
    call: Call,
    ws: WsPath,
    job_agent_id: Annotated[UUID | None, Query(alias="jobAgentId")] = None,
    state: ClaimState = ClaimState.ALL,
    limit: Limit = 50,
    offset: Offset = 0,
) -> bytes:
    """List in-flight claims (active, expired) and unleased inProgress jobs"""
    claims, total = await call.service.list_claims(
        call.principal, ws, agent_id=job_agent_id, state=state, limit=limit, offset=offset
    )
    return page_bytes(claims, total, limit, offset)


@endpoint("GET", Routes.ATTEMPTS, list[JobAttempt], tag="leases")
async def list_job_attempts(call: Call, ws: WsPath, job_id: JobPath) -> bytes:
    """A job's claim attempts, oldest first"""
    return list_bytes(await call.service.list_attempts(call.principal, ws, job_id))


@endpoint("POST", Routes.AGENT_JOBS, Job, tag="jobs", status=201)
async def create_job(
    call: Call,
    ws: WsPath,
    agent_id: AgentPath,
    body: Annotated[CreateJobRequest | None, Body()] = None,
) -> bytes:
    """Create a queued job for the agent"""
    job = await call.service.create_job(call.principal, ws, agent_id, body or CreateJobRequest())
    return job_bytes(job, True)


# --- job logs ---------------------------------------------------------------------------------

_LOG_ERRORS: dict[int | str, dict[str, Any]] = {
    **CONFLICTS,
    404: {"model": ErrorBody, "description": "LOG_NOT_FOUND: unknown job or attempt"},
}
_LOG_READ_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    404: {"model": ErrorBody, "description": "LOG_NOT_FOUND: unknown job or attempt"},
    410: {"model": ErrorBody, "description": "LOG_EXPIRED: deleted by the log retention"},
}


@endpoint("POST", Routes.JOB_LOGS, LogAppendResult, tag="logs", responses=_LOG_ERRORS, hot=True)
async def append_job_logs(call: Call, ws: WsPath, job_id: JobPath, body: LogAppendRequest) -> bytes:
    """Append output chunks to the log of the attempt that claimId holds

    Fenced as a heartbeat: a claimId that is not the job's current claim is refused (409
    CLAIM_LOST / CLAIM_MISMATCH) and nothing is written. Each chunk's data is the base64 of its
    raw bytes, at most 64 KiB of them.
    """
    return model_bytes(await call.service.logs.append(call.principal, ws, job_id, body))


@endpoint("GET", Routes.JOB_LOGS, LogPage, tag="logs", responses=_LOG_READ_ERRORS)
async def read_job_logs(
    call: Call,
    ws: WsPath,
    job_id: JobPath,
    attempt: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="Default: latest")] = None,
    after: Annotated[int, Query(ge=0, le=2**31 - 1, description="Chunks after this seq")] = 0,
    wait_seconds: Annotated[
        float | None, Query(alias="waitSeconds", ge=0, description="Long-poll up to this")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most chunks, 1–1000")] = 100,
) -> bytes:
    """Read an attempt's log after a cursor, long-polling up to waitSeconds for more

    Without waitSeconds the answer comes at once, as it does when there are chunks after the cursor
    or the attempt has ended. Else the read waits for new chunks or the attempt's end.
    """
    logs, principal = call.service.logs, call.principal

    async def read(disconnected: asyncio.Event | None) -> LogPage:
        return await logs.read(
            principal,
            ws,
            job_id,
            attempt=attempt,
            after=after,
            limit=limit,
            wait_seconds=wait_seconds,
            disconnected=disconnected,
        )

    page = await (_until_gone(call.receive, read) if wait_seconds else read(None))
    return model_bytes(page)


@endpoint("GET", Routes.CLAIMS_URGENT, UrgentClaims, tag="leases")
async def urgent_job_claims(
    call: Call,
    ws: WsPath,
    job_agent_id: Annotated[UUID | None, Query(alias="jobAgentId")] = None,
    state: ClaimState = ClaimState.ALL,
    stale_after: StaleAfter = None,
    quiet_after: QuietAfter = None,
    limit: Limit = 50,
) -> bytes:
    """The most urgent claims first, and how many there are of each kind

    Expired claims (longest overdue first), then unleased, stale or quiet ones, then the rest
    by nearest expiry; ``counts`` has every mark's number over all the matching claims.
    """
    claims, counts = await call.service.urgent_claims(
        call.principal,
        ws,
        agent_id=job_agent_id,
        state=state,
        marks=(stale_after, quiet_after),
        limit=limit,
    )
    total = sum(counts.values())
    return model_bytes(UrgentClaims(items=claims, counts=counts, total=total, limit=limit))
