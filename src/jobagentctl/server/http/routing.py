"""The framework's routes: one per endpoint of ``operations.ENDPOINTS``, and the operators'
/healthz, /readyz and /metrics.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import PlainTextResponse, Response

from jobagentctl.errors import JobAgentError, ServerUnavailable
from jobagentctl.models import ErrorBody
from jobagentctl.routes import Routes
from jobagentctl.server.http.edge import PRINCIPAL
from jobagentctl.server.http.encoding import json_response
from jobagentctl.server.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.http.operations import ENDPOINTS, Call, Endpoint
from jobagentctl.server.service import JobService

__all__ = ["add_api_routes", "add_operational_routes"]

# /readyz answers within this many seconds whatever the database does: a frozen database is
# "not ready".
_READY_TIMEOUT = 1.0
_REQUEST = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request)


def add_api_routes(app: FastAPI, service: JobService) -> None:
    """Route every endpoint of ``operations.ENDPOINTS`` to its operation."""
    for endpoint in ENDPOINTS:
        app.add_api_route(
            endpoint.template,
            _route(service, endpoint),
            methods=[endpoint.method],
            name=endpoint.operation.__name__,
            status_code=endpoint.status,
            response_model=endpoint.response_model,
            responses=endpoint.responses,
            tags=[endpoint.tag],
            summary=endpoint.summary,
        )


def _route(service: JobService, endpoint: Endpoint) -> Any:
    """The framework's function for ``endpoint``. Its signature is the operation's after the
    ``Call``, with the request in front. FastAPI parses, validates and documents those parameters as
    declared there. The call is made from the request: the principal the edge admitted and the
    connection."""
    operation = endpoint.operation

    async def route(request: Request, **parameters: Any) -> Response:
        call = Call(service, request.scope[PRINCIPAL], request.receive)
        return json_response(endpoint.answer(await operation(call, **parameters)))

    route.__signature__ = inspect.Signature([_REQUEST, *endpoint.parameters])  # type: ignore[attr-defined]
    return route


def add_operational_routes(app: FastAPI, service: JobService, metrics: Metrics) -> None:
    """/healthz (the process is alive), /readyz (and can serve), /metrics (Prometheus)."""

    @app.get(Routes.HEALTHZ, tags=["operations"], summary="The process is alive")
    async def healthz() -> Response:
        return json_response((200, b'{"status":"ok"}'))

    @app.get(
        Routes.READYZ,
        tags=["operations"],
        summary="The database is reachable and its schema current",
        responses={503: {"model": ErrorBody}},
    )
    async def readyz() -> Response:
        if service.stopping:
            raise ServerUnavailable("shutting down")
        try:
            problem = await asyncio.wait_for(service.store.readiness(), _READY_TIMEOUT)
        except (JobAgentError, TimeoutError):
            problem = ServerUnavailable(
                f"database unreachable: no answer within {_READY_TIMEOUT:g} s"
            )
        if problem is not None:
            raise problem  # its message says why; a load balancer takes the replica out
        upstream = getattr(service, "upstream_state", None)  # gateway mode: ctrlplane's
        if upstream is not None:
            state = (await upstream()).encode()
            return json_response((200, b'{"status":"ready","upstream":"' + state + b'"}'))
        return json_response((200, b'{"status":"ready"}'))

    @app.get(
        Routes.METRICS,
        tags=["operations"],
        summary="Prometheus metrics",
        response_class=PlainTextResponse,  # documents text/plain, as Prometheus serves it
    )
    async def prometheus_metrics() -> Response:
        body = await metrics.render(service.store, service.settings.presence_window)
        return Response(body, media_type=METRICS_CONTENT_TYPE)
