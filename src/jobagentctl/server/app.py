"""The HTTP API (SPEC §4): routes → ``JobService``; errors always ``{message, code, details}``.

The four hot endpoints are answered by ``fastpath.FastPath`` before the framework runs; for the
rest, one pure-ASGI middleware does the shared per-request work (authentication, body limit,
latency metric). Responses are ``model_dump_json`` bytes, never re-validated by the framework.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobagentctl import __version__
from jobagentctl.errors import AuthError, JobAgentError, PayloadTooLarge, ValidationError
from jobagentctl.models import (
    AcceptedResponse,
    ClaimedJob,
    ClaimNextRequest,
    ClaimRequest,
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
)
from jobagentctl.server.auth import Authenticator, Principal
from jobagentctl.server.encoding import (
    NO_CONTEXT,
    error_bytes,
    exception_bytes,
    job_bytes,
    list_bytes,
    model_bytes,
    page_bytes,
)
from jobagentctl.server.fastpath import (
    FastPath,
    claim_job_op,
    claim_next_op,
    heartbeat_op,
    match,
    update_status_op,
)
from jobagentctl.server.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from jobagentctl.server.metrics import Metrics
from jobagentctl.server.reaper import Reaper
from jobagentctl.server.service import JobService
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store.base import Store

__all__ = ["API_PREFIX", "JobAgentApp", "create_app"]

logger = logging.getLogger("jobagentctl.server")

API_PREFIX = "/api"
_V1 = f"{API_PREFIX}/v1/"
_PRINCIPAL = "jobagentctl.principal"
_JSON = "application/json"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

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
    principal: Principal = request.scope[_PRINCIPAL]
    return principal


# --- the per-request middleware ---------------------------------------------------------------


class _ApiMiddleware:
    """Authentication and the body limit for ``/api/v1/*``; latency for every request.

    Authentication happens before routing and validation: a caller without a valid key gets
    401 and learns nothing, not even that its path or body was malformed.
    """

    def __init__(
        self, app: ASGIApp, *, auth: Authenticator, metrics: Metrics, max_body_bytes: int
    ) -> None:
        self.app = app
        self.auth = auth
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if scope["path"].startswith(_V1):
                error, receive = await self._admit(scope, receive)
                if error is not None:
                    await _error_response(error)(scope, receive, send_status)
                    return
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.request_latency.labels(scope["method"], template, str(status)).observe(
                time.perf_counter() - started
            )

    async def _admit(self, scope: Scope, receive: Receive) -> tuple[JobAgentError | None, Receive]:
        api_key: str | None = None
        content_length: int | None = None
        chunked = False
        foreign_type = False
        for name, value in scope["headers"]:
            if name == b"x-api-key":
                api_key = value.decode("latin-1")
            elif name == b"content-length":
                try:
                    content_length = int(value)
                except ValueError:
                    return ValidationError("invalid Content-Length header"), receive
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"content-type" and b"json" not in value.lower():
                foreign_type = True
        if foreign_type:
            # Bodies are JSON whatever the client labelled them (`curl -d` says form data).
            scope["headers"] = [
                (n, b"application/json" if n == b"content-type" else v) for n, v in scope["headers"]
            ]
        try:
            scope[_PRINCIPAL] = await self.auth.authenticate(api_key)
        except AuthError as exc:
            return exc, receive
        if content_length is not None:
            if content_length > self.max_body_bytes:
                return self._too_large(), receive
            # The HTTP server never delivers more than Content-Length bytes: nothing to count.
            return None, receive
        if chunked and scope["method"] in _BODY_METHODS:
            return await self._buffer(receive)
        return None, receive

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body exceeds {self.max_body_bytes} bytes",
            details={"maxBodyBytes": self.max_body_bytes},
        )

    async def _buffer(self, receive: Receive) -> tuple[JobAgentError | None, Receive]:
        """Read a body of unknown length up to the limit, then replay it to the app."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, receive
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return self._too_large(), receive
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False
        body = b"".join(chunks)

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return None, replay


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
    if exc.status >= 500:
        logger.warning("%s %s → %d %s", request.method, request.url.path, exc.status, exc.code)
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
    """FastAPI, with the hot endpoints answered by :class:`FastPath` before the framework's
    middleware and routing run (see ``fastpath.py``); everything else is plain FastAPI."""

    fast_path: FastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.fast_path
        if fast is not None:
            hit = match(scope)
            if hit is not None:
                replay = await fast.handle(scope, receive, send, *hit)
                if replay is None:
                    return
                receive = replay
        await super().__call__(scope, receive, send)


def create_app(settings: ServerSettings | None = None, store: Store | None = None) -> FastAPI:
    """The ASGI app. Without ``store`` it opens (and migrates) one from ``settings.database``
    in its lifespan and closes it on shutdown; a given store is the caller's to open/close.
    The reaper runs in the lifespan when ``reap_interval`` > 0."""
    settings = settings or ServerSettings()
    owns_store = store is None
    if store is None:
        from jobagentctl.server.store import open_store

        store = open_store(settings.database)
    the_store: Store = store
    metrics = Metrics()
    service = JobService(the_store, settings, metrics)
    auth = Authenticator(the_store, ttl=settings.key_cache_seconds)
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
    app.fast_path = FastPath(service, auth, metrics, settings.max_body_bytes)

    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(JobAgentError, _on_job_agent_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_middleware(
        _ApiMiddleware, auth=auth, metrics=metrics, max_body_bytes=settings.max_body_bytes
    )

    _add_operational_routes(app, service, metrics)
    _add_v1_routes(app, service)
    _add_v2_routes(app, service)
    _document_security(app)
    return app


def _add_operational_routes(app: FastAPI, service: JobService, metrics: Metrics) -> None:
    @app.get("/healthz", tags=["operations"], summary="The process is alive")
    async def healthz() -> Response:
        return _json(b'{"status":"ok"}')

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="The database is reachable and its schema current",
        responses={503: {"model": ErrorBody}},
    )
    async def readyz() -> Response:
        if service.stopping:
            return _json(error_bytes("shutting down", "SERVICE_UNAVAILABLE", None), 503)
        try:
            ready = await service.store.schema_current()
        except JobAgentError:
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
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=PlainTextResponse,  # documents text/plain, as Prometheus serves it
    )
    async def prometheus_metrics() -> Response:
        return Response(await metrics.render(service.store), media_type=METRICS_CONTENT_TYPE)


def _add_v1_routes(app: FastAPI, service: JobService) -> None:
    v1 = f"{API_PREFIX}/v1/workspaces/{{ws}}"

    @app.put(
        f"{v1}/job-agents/{{agentId}}",
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
        return _json(model_bytes(result), 202)

    @app.get(
        f"{v1}/job-agents",
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
        f"{v1}/job-agents/{{agentId}}",
        response_model=JobAgent,
        responses=_ERRORS,
        tags=["job agents"],
        summary="Get a job agent",
    )
    async def get_job_agent(request: Request, ws: WsPath, agent_id: AgentPath) -> Response:
        agent = await service.get_agent(_principal(request), ws, agent_id)
        return _json(model_bytes(agent))

    @app.delete(
        f"{v1}/job-agents/{{agentId}}",
        status_code=202,
        response_model=AcceptedResponse,
        responses=_ERRORS,
        tags=["job agents"],
        summary="Delete a job agent",
    )
    async def delete_job_agent(request: Request, ws: WsPath, agent_id: AgentPath) -> Response:
        result = await service.delete_agent(_principal(request), ws, agent_id)
        return _json(model_bytes(result), 202)

    @app.get(
        f"{v1}/job-agents/{{agentId}}/jobs",
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
        exclude = None if include_dispatch_context else NO_CONTEXT
        return _json(page_bytes(items, total, limit, offset, exclude=exclude))

    @app.post(
        f"{v1}/job-agents/{{agentId}}/jobs/{{jobId}}/claim",
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
        f"{v1}/jobs",
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
        return _json(page_bytes(items, total, limit, offset, exclude=NO_CONTEXT))

    @app.get(
        f"{v1}/jobs/{{jobId}}",
        response_model=Job,
        responses=_ERRORS,
        tags=["jobs"],
        summary="Get a job, with its dispatch context",
    )
    async def get_job(request: Request, ws: WsPath, job_id: JobPath) -> Response:
        job = await service.get_job(_principal(request), ws, job_id)
        return _json(job_bytes(job, True))

    @app.put(
        f"{v1}/jobs/{{jobId}}/status",
        status_code=202,
        response_model=AcceptedResponse,
        responses={**_ERRORS, **_CONFLICTS},
        tags=["leases"],
        summary="Set a job's status, fenced by claimId",
    )
    async def update_job_status(
        request: Request, ws: WsPath, job_id: JobPath, body: UpdateJobStatusRequest
    ) -> Response:
        return _result(await update_status_op(service, _principal(request), ws, job_id, body))


def _add_v2_routes(app: FastAPI, service: JobService) -> None:
    v1 = f"{API_PREFIX}/v1/workspaces/{{ws}}"

    @app.post(
        f"{v1}/job-agents/{{agentId}}/claim",
        response_model=ClaimedJob,
        responses={**_ERRORS, 204: {"description": "No job queued within waitSeconds"}},
        tags=["leases"],
        summary="Claim the agent's oldest queued job, long-polling up to waitSeconds",
    )
    async def claim_next_job(
        request: Request,
        ws: WsPath,
        agent_id: AgentPath,
        body: Annotated[ClaimNextRequest | None, Body()] = None,
    ) -> Response:
        return _result(await claim_next_op(service, _principal(request), ws, agent_id, body))

    @app.post(
        f"{v1}/jobs/{{jobId}}/heartbeat",
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

    @app.get(
        f"{v1}/job-claims",
        response_model=Page[JobClaim],
        responses=_ERRORS,
        tags=["leases"],
        summary="List in-flight claims (active, expired) and unleased inProgress jobs",
    )
    async def list_job_claims(
        request: Request,
        ws: WsPath,
        job_agent_id: Annotated[UUID | None, Query(alias="jobAgentId")] = None,
        state: Literal["active", "expired", "unleased", "all"] = "all",
        limit: Limit = 50,
        offset: Offset = 0,
    ) -> Response:
        items, total = await service.list_claims(
            _principal(request), ws, agent_id=job_agent_id, state=state, limit=limit, offset=offset
        )
        return _json(page_bytes(items, total, limit, offset))

    @app.get(
        f"{v1}/jobs/{{jobId}}/attempts",
        response_model=list[JobAttempt],
        responses=_ERRORS,
        tags=["leases"],
        summary="A job's claim attempts, oldest first",
    )
    async def list_job_attempts(request: Request, ws: WsPath, job_id: JobPath) -> Response:
        attempts = await service.list_attempts(_principal(request), ws, job_id)
        return _json(list_bytes(attempts))

    @app.post(
        f"{v1}/job-agents/{{agentId}}/jobs",
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
                if path.startswith(_V1):
                    operation["security"] = [{"ApiKey": []}]
        schemas = components.get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
