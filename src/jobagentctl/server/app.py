"""The HTTP API (SPEC §4): routes → ``JobService``; errors always ``{message, code, details}``.

Every request enters through ``edge.Edge`` (admission: key, body limit, JSON depth; response
step: metric and 5xx log); the four hot endpoints may then be answered by the fast path
(``fastpath.py``) before the framework's routing runs. Route templates live in
``routes.Routes``. Responses are ``model_dump_json`` bytes, never re-validated by the
framework.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

from jobagentctl import __version__
from jobagentctl.errors import JobAgentError
from jobagentctl.models import (
    AcceptedResponse,
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
    Page,
    UpdateJobStatusRequest,
    UpsertJobAgentRequest,
    WireModel,
)
from jobagentctl.routes import API_PREFIX, V1_PREFIX, Routes
from jobagentctl.server.auth import Authenticator, Principal
from jobagentctl.server.edge import PRINCIPAL, Edge
from jobagentctl.server.encoding import (
    accepted_bytes,
    error_bytes,
    exception_bytes,
    job_bytes,
    job_page_bytes,
    list_bytes,
    model_bytes,
    page_bytes,
)
from jobagentctl.server.fastpath import FastPath
from jobagentctl.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from jobagentctl.server.metrics import Metrics
from jobagentctl.server.operations import (
    JobWaitRequest,
    JobWaitResult,
    claim_job_op,
    claim_next_op,
    heartbeat_op,
    job_wait_op,
    update_status_op,
)
from jobagentctl.server.reaper import Reaper
from jobagentctl.server.service import JobService
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import Store

__all__ = ["API_PREFIX", "JobAgentApp", "create_app"]

logger = logging.getLogger("jobagentctl.server")

_JSON = "application/json"
_READY_TIMEOUT = 1.0

# --- responses --------------------------------------------------------------------------------


def _json(content: bytes, status: int = 200) -> Response:
    if status == 204:
        return Response(status_code=204)
    return Response(content=content, status_code=status, media_type=_JSON)


def _result(result: tuple[int, bytes]) -> Response:
    status, content = result
    return _json(content, status)


def _error_response(exc: JobAgentError) -> Response:
    return _json(exception_bytes(exc), exc.status)


def _principal(request: Request) -> Principal:
    principal: Principal = request.scope[PRINCIPAL]
    return principal


# --- error handlers ---------------------------------------------------------------------------


def _field_name(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    fields = []
    for error in exc.errors():
        loc = error.get("loc", ())
        message = "invalid JSON" if error.get("type") == "json_invalid" else error.get("msg", "")
        # The input is not echoed back: it may be large, and it may be something secret.
        fields.append({"field": _field_name(loc), "message": message, "type": error.get("type")})
    names = ", ".join(f["field"] for f in fields) or "request"
    return _json(
        error_bytes(f"invalid request: {names}", "VALIDATION_ERROR", {"errors": fields}), 400
    )


async def _on_job_agent_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, JobAgentError)
    return _error_response(exc)


_HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 400: "VALIDATION_ERROR"}


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "HTTP_ERROR")
    message = "not found" if exc.status_code == 404 else str(exc.detail)
    response = _json(error_bytes(message, code, None), exc.status_code)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    # Details stay in the server log; the client learns only that it was our fault.
    logger.error(
        "unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path, exc_info=exc
    )
    return _json(error_bytes("internal server error", "INTERNAL_ERROR", None), 500)


# --- the app ----------------------------------------------------------------------------------

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "VALIDATION_ERROR: malformed id, query or body"},
    401: {"model": ErrorBody, "description": "UNAUTHORIZED: missing, invalid or revoked key"},
    404: {"model": ErrorBody, "description": "NOT_FOUND: unknown, or outside the key's scope"},
    413: {"model": ErrorBody, "description": "PAYLOAD_TOO_LARGE"},
}
_CONFLICTS: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "NOT_CLAIMABLE, CLAIM_LOST, CLAIM_MISMATCH or JOB_TERMINAL; "
        "details.jobStatus tells the job's status",
    }
}

WsPath = Annotated[UUID, Path(alias="ws", description="Workspace id")]
AgentPath = Annotated[UUID, Path(alias="agentId", description="Job agent id")]
JobPath = Annotated[UUID, Path(alias="jobId", description="Job id")]
Limit = Annotated[int, Query(ge=1, le=1000, description="Page size, 1–1000")]
Offset = Annotated[int, Query(ge=0, le=2**63 - 1, description="Items to skip")]
StatusFilter = Annotated[
    list[JobStatus] | None, Query(alias="status", description="Only jobs with this status")
]


class JobAgentApp(FastAPI):
    """FastAPI behind :class:`Edge`: every request goes through the edge's admission and
    response steps; the edge hands what the fast path does not answer to the framework."""

    edge: Edge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.edge(scope, receive, send)

    async def framework(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


def create_app(settings: ServerSettings | None = None, store: Store | None = None) -> FastAPI:
    """The ASGI app. Without ``store`` it opens (and migrates) one from ``settings.database``
    in its lifespan and closes it on shutdown; a given store is the caller's to open/close.
    The reaper runs in the lifespan when ``reap_interval`` > 0."""
    settings = settings or ServerSettings()
    owns_store = store is None
    if store is None:
        from jobagentctl.server.store import open_store

        store = open_store(settings.database, **settings.store_options())
    the_store: Store = store
    metrics = Metrics()
    auth = Authenticator(
        the_store, ttl=settings.key_cache_seconds, lookup_timeout=settings.database_timeout
    )
    service = JobService(the_store, settings, metrics, key_check=auth.reverify)
    reaper = Reaper(
        the_store,
        interval=settings.reap_interval,
        batch_size=settings.reap_batch_size,
        max_reclaims=settings.max_reclaims,
        metrics=metrics,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if owns_store:
            await the_store.open()
            await the_store.migrate()
        if settings.reap_interval > 0:
            reaper.start()
        try:
            yield
        finally:
            service.begin_shutdown()
            await reaper.stop()
            if owns_store:
                await the_store.close()

    app = JobAgentApp(
        title="jobagentctl",
        version=__version__,
        description="Pull-based job agents with leases: ctrlplane's pull-agent API (V1) plus "
        "the V2 lease additions (claim-next, heartbeat, claims, attempts).",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=lifespan,
        strict_content_type=False,
    )
    app.state.settings = settings
    app.state.store = the_store
    app.state.service = service
    app.state.auth = auth
    app.state.metrics = metrics
    app.state.reaper = reaper
    app.edge = Edge(
        app.framework,
        auth=auth,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        max_json_depth=settings.max_json_depth,
        fast_path=FastPath(service) if settings.fast_path else None,
    )

    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(JobAgentError, _on_job_agent_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)

    _add_operational_routes(app, service, metrics)
    _add_workspace_routes(app, service)  # before the {ws} routes: "slug" is not an id
    _add_v1_routes(app, service)
    _add_v2_routes(app, service)
    _document_security(app)
    return app


def _add_operational_routes(app: FastAPI, service: JobService, metrics: Metrics) -> None:
    @app.get(Routes.HEALTHZ, tags=["operations"], summary="The process is alive")
    async def healthz() -> Response:
        return _json(b'{"status":"ok"}')

    @app.get(
        Routes.READYZ,
        tags=["operations"],
        summary="The database is reachable and its schema current",
        responses={503: {"model": ErrorBody}},
    )
    async def readyz() -> Response:
        if service.stopping:
            return _json(error_bytes("shutting down", "SERVICE_UNAVAILABLE", None), 503)
        try:
            # Within 1 s whatever the database does: a frozen database is "not ready".
            ready = await asyncio.wait_for(service.store.schema_current(), _READY_TIMEOUT)
        except (JobAgentError, TimeoutError):
            ready = False
        if not ready:
            return _json(
                error_bytes(
                    "database unreachable or migrations pending", "SERVICE_UNAVAILABLE", None
                ),
                503,
            )
        return _json(b'{"status":"ready"}')

    @app.get(
        Routes.METRICS,
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=PlainTextResponse,  # documents text/plain, as Prometheus serves it
    )
    async def prometheus_metrics() -> Response:
        return Response(await metrics.render(service.store), media_type=METRICS_CONTENT_TYPE)


class WorkspaceOut(WireModel):
    """ctrlplane's ``Workspace`` (openapi.json), the fields this server has."""

    id: UUID
    name: str
    slug: str
    created_at: datetime


def _add_workspace_routes(app: FastAPI, service: JobService) -> None:
    @app.get(
        Routes.WORKSPACE_BY_SLUG,
        response_model=WorkspaceOut,
        responses=_ERRORS,
        tags=["workspaces"],
        summary="Resolve a workspace slug to the workspace (ctrlplane's getWorkspaceBySlug)",
    )
    async def get_workspace_by_slug(
        request: Request,
        slug: Annotated[str, Path(min_length=1, max_length=50, description="Workspace slug")],
    ) -> Response:
        record = await service.workspace_by_slug(_principal(request), slug)
        out = WorkspaceOut(
            id=record.id, name=record.name, slug=record.slug, created_at=record.created_at
        )
        return _json(model_bytes(out))


def _add_v1_routes(app: FastAPI, service: JobService) -> None:
    @app.put(
        Routes.AGENT,
        status_code=202,
        response_model=AcceptedResponse,
        responses=_ERRORS,
        tags=["job agents"],
        summary="Create or replace a job agent",
    )
    async def upsert_job_agent(
        request: Request, ws: WsPath, agent_id: AgentPath, body: UpsertJobAgentRequest
    ) -> Response:
        result = await service.upsert_agent(_principal(request), ws, agent_id, body)
        return _json(accepted_bytes(result), 202)

    @app.get(
        Routes.AGENTS,
        response_model=Page[JobAgent],
        responses=_ERRORS,
        tags=["job agents"],
        summary="List job agents",
    )
    async def list_job_agents(
        request: Request, ws: WsPath, limit: Limit = 50, offset: Offset = 0
    ) -> Response:
        items, total = await service.list_agents(_principal(request), ws, limit, offset)
        return _json(page_bytes(items, total, limit, offset))

    @app.get(
        Routes.AGENT,
        response_model=JobAgent,
        responses=_ERRORS,
        tags=["job agents"],
        summary="Get a job agent",
    )
    async def get_job_agent(request: Request, ws: WsPath, agent_id: AgentPath) -> Response:
        agent = await service.get_agent(_principal(request), ws, agent_id)
        return _json(model_bytes(agent))

    @app.delete(
        Routes.AGENT,
        status_code=202,
        response_model=AcceptedResponse,
        responses=_ERRORS,
        tags=["job agents"],
        summary="Delete a job agent",
    )
    async def delete_job_agent(request: Request, ws: WsPath, agent_id: AgentPath) -> Response:
        result = await service.delete_agent(_principal(request), ws, agent_id)
        return _json(accepted_bytes(result), 202)

    @app.get(
        Routes.AGENT_JOBS,
        response_model=Page[Job],
        responses=_ERRORS,
        tags=["jobs"],
        summary="List the agent's jobs, newest first",
    )
    async def list_agent_jobs(
        request: Request,
        ws: WsPath,
        agent_id: AgentPath,
        status: StatusFilter = None,
        include_dispatch_context: Annotated[bool, Query(alias="includeDispatchContext")] = False,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Response:
        items, total = await service.list_agent_jobs(
            _principal(request),
            ws,
            agent_id,
            statuses=status,
            include_dispatch_context=include_dispatch_context,
            limit=limit,
            offset=offset,
        )
        return _json(
            job_page_bytes(
                items, total, limit, offset, include_dispatch_context=include_dispatch_context
            )
        )

    @app.post(
        Routes.CLAIM,
        response_model=ClaimedJob,
        responses={**_ERRORS, **_CONFLICTS},
        tags=["leases"],
        summary="Claim a queued job (a lease only when asked for or configured)",
    )
    async def claim_job(
        request: Request,
        ws: WsPath,
        agent_id: AgentPath,
        job_id: JobPath,
        body: Annotated[ClaimRequest | None, Body()] = None,
    ) -> Response:
        return _result(await claim_job_op(service, _principal(request), ws, agent_id, job_id, body))

    @app.get(
        Routes.JOBS,
        response_model=Page[Job],
        responses=_ERRORS,
        tags=["jobs"],
        summary="List the workspace's jobs, newest first",
    )
    async def list_jobs(
        request: Request,
        ws: WsPath,
        status: StatusFilter = None,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Response:
        items, total = await service.list_jobs(
            _principal(request), ws, statuses=status, limit=limit, offset=offset
        )
        return _json(job_page_bytes(items, total, limit, offset, include_dispatch_context=False))

    @app.get(
        Routes.JOB,
        response_model=Job,
        responses=_ERRORS,
        tags=["jobs"],
        summary="Get a job, with its dispatch context",
    )
    async def get_job(request: Request, ws: WsPath, job_id: JobPath) -> Response:
        job = await service.get_job(_principal(request), ws, job_id)
        return _json(job_bytes(job, True))

    @app.put(
        Routes.JOB_STATUS,
        status_code=202,
        response_model=AcceptedResponse,
        responses={**_ERRORS, **_CONFLICTS},
        tags=["leases"],
        summary="Set a job's status, fenced by claimId (with claimNext: and claim the next jobs)",
    )
    async def update_job_status(
        request: Request, ws: WsPath, job_id: JobPath, body: UpdateJobStatusRequest
    ) -> Response:
        return _result(await update_status_op(service, _principal(request), ws, job_id, body))


def _add_v2_routes(app: FastAPI, service: JobService) -> None:
    @app.post(
        Routes.CLAIM_NEXT,
        response_model=ClaimedJob | ClaimedJobs,
        responses={**_ERRORS, 204: {"description": "No job queued within waitSeconds"}},
        tags=["leases"],
        summary="Claim the agent's oldest queued job (its `limit` oldest: {items}), "
        "long-polling up to waitSeconds",
    )
    async def claim_next_job(
        request: Request,
        ws: WsPath,
        agent_id: AgentPath,
        body: Annotated[ClaimNextRequest | None, Body()] = None,
    ) -> Response:
        return _result(
            await claim_next_op(service, _principal(request), ws, agent_id, body, request.receive)
        )

    @app.post(
        Routes.HEARTBEAT,
        response_model=Heartbeat,
        responses={**_ERRORS, **_CONFLICTS},
        tags=["leases"],
        summary="Extend the claim's lease",
    )
    async def heartbeat(
        request: Request,
        ws: WsPath,
        job_id: JobPath,
        body: Annotated[HeartbeatRequest | None, Body()] = None,
    ) -> Response:
        return _result(await heartbeat_op(service, _principal(request), ws, job_id, body))

    @app.post(
        Routes.JOB_WAIT,
        response_model=JobWaitResult,
        responses={**_ERRORS},
        tags=["leases"],
        summary="Wait until the claim is no longer held (cancelled, released, reaped, "
        "completed) or waitSeconds run out (claimHeld true)",
    )
    async def wait_for_job_claim(
        request: Request, ws: WsPath, job_id: JobPath, body: JobWaitRequest
    ) -> Response:
        return _result(
            await job_wait_op(service, _principal(request), ws, job_id, body, request.receive)
        )

    @app.get(
        Routes.CLAIMS,
        response_model=Page[JobClaim],
        responses=_ERRORS,
        tags=["leases"],
        summary="List in-flight claims (active, expired) and unleased inProgress jobs",
    )
    async def list_job_claims(
        request: Request,
        ws: WsPath,
        job_agent_id: Annotated[UUID | None, Query(alias="jobAgentId")] = None,
        state: ClaimState = ClaimState.ALL,
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Response:
        items, total = await service.list_claims(
            _principal(request), ws, agent_id=job_agent_id, state=state, limit=limit, offset=offset
        )
        return _json(page_bytes(items, total, limit, offset))

    @app.get(
        Routes.ATTEMPTS,
        response_model=list[JobAttempt],
        responses=_ERRORS,
        tags=["leases"],
        summary="A job's claim attempts, oldest first",
    )
    async def list_job_attempts(request: Request, ws: WsPath, job_id: JobPath) -> Response:
        attempts = await service.list_attempts(_principal(request), ws, job_id)
        return _json(list_bytes(attempts))

    @app.post(
        Routes.AGENT_JOBS,
        status_code=201,
        response_model=Job,
        responses=_ERRORS,
        tags=["jobs"],
        summary="Create a queued job for the agent",
    )
    async def create_job(
        request: Request,
        ws: WsPath,
        agent_id: AgentPath,
        body: Annotated[CreateJobRequest | None, Body()] = None,
    ) -> Response:
        job = await service.create_job(
            _principal(request), ws, agent_id, body or CreateJobRequest()
        )
        return _json(job_bytes(job, True), 201)


def _document_security(app: FastAPI) -> None:
    """Add the X-API-Key scheme to the OpenAPI document (auth runs in the middleware, so the
    routes do not declare it themselves)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {})
        components.setdefault("securitySchemes", {})["ApiKey"] = {
            "type": "apiKey",
            "in": "header",
            "name": "X-API-Key",
            "description": "<prefix>.<secret>; a workspace key or an agent key",
        }
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                # Validation errors are answered 400 VALIDATION_ERROR (declared per route), never
                # FastAPI's default 422: a generated client must not expect that shape.
                operation.get("responses", {}).pop("422", None)
                if path.startswith(V1_PREFIX):
                    operation["security"] = [{"ApiKey": []}]
        schemas = components.get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
