"""The hot endpoints — claim, claim-next, heartbeat, status — served without framework routing.

An agent loop is nothing but these four calls, so they skip FastAPI's route matching, dependency
resolution and middleware stack (most of the per-request CPU). Only well-formed requests take
this path: anything unusual (a query string, a malformed id, a body that does not validate) is
handed to the FastAPI routes, body replayed, so errors and the OpenAPI document stay the
framework's. Both paths call the same operation functions below and answer the same bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from starlette.types import Message, Receive, Scope, Send

from jobagentctl.errors import JobAgentError, PayloadTooLarge
from jobagentctl.models import (
    ClaimNextRequest,
    ClaimRequest,
    HeartbeatRequest,
    UpdateJobStatusRequest,
)
from jobagentctl.server.auth import Authenticator, Principal
from jobagentctl.server.encoding import error_bytes, exception_bytes, job_bytes, model_bytes
from jobagentctl.server.metrics import Metrics
from jobagentctl.server.service import JobService

__all__ = [
    "FastPath",
    "claim_job_op",
    "claim_next_op",
    "heartbeat_op",
    "update_status_op",
]

logger = logging.getLogger("jobagentctl.server")

Result = tuple[int, bytes]

# --- the operations (also called by the FastAPI routes) ----------------------------------------


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
    disconnected: asyncio.Event | None = None,
) -> Result:
    job = await service.claim_next(principal, ws, agent_id, body, disconnected)
    if job is None:
        return 204, b""
    return 200, job_bytes(job, True)


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
    return 202, model_bytes(accepted)


# --- matching -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Route:
    template: str  # the FastAPI route path: the latency metric's label
    model: type[BaseModel]
    body_required: bool
    call: Callable[[JobService, Principal, list[UUID], Any, Receive], Awaitable[Result]]


_PREFIX = "/api/v1/workspaces/{ws}"

_CLAIM_NEXT = _Route(
    f"{_PREFIX}/job-agents/{{agentId}}/claim",
    ClaimNextRequest,
    False,
    lambda s, p, ids, body, receive: _claim_next_watching(s, p, ids, body, receive),
)
_CLAIM = _Route(
    f"{_PREFIX}/job-agents/{{agentId}}/jobs/{{jobId}}/claim",
    ClaimRequest,
    False,
    lambda s, p, ids, body, receive: claim_job_op(s, p, ids[0], ids[1], ids[2], body),
)
_HEARTBEAT = _Route(
    f"{_PREFIX}/jobs/{{jobId}}/heartbeat",
    HeartbeatRequest,
    False,
    lambda s, p, ids, body, receive: heartbeat_op(s, p, ids[0], ids[1], body),
)
_STATUS = _Route(
    f"{_PREFIX}/jobs/{{jobId}}/status",
    UpdateJobStatusRequest,
    True,
    lambda s, p, ids, body, receive: update_status_op(s, p, ids[0], ids[1], body),
)


async def _claim_next_watching(
    service: JobService,
    principal: Principal,
    ids: list[UUID],
    body: ClaimNextRequest | None,
    receive: Receive,
) -> Result:
    """Claim-next; a long-poll also watches the connection, so a job queued after the client
    has gone away is not claimed for nobody (it would sit leased until its lease ran out)."""
    if body is None or not body.wait_seconds:
        return await claim_next_op(service, principal, ids[0], ids[1], body)
    disconnected = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected.set()

    watcher = asyncio.ensure_future(watch())
    try:
        return await claim_next_op(service, principal, ids[0], ids[1], body, disconnected)
    finally:
        watcher.cancel()
        # The watcher only observes; whatever ended it must not change the answer.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher


def _uuids(*values: str) -> list[UUID] | None:
    out = []
    for value in values:
        # Only the canonical 36-character form: other spellings go to the framework, which
        # decides what it accepts (so both paths agree on every input).
        if len(value) != 36:
            return None
        try:
            out.append(UUID(value))
        except ValueError:
            return None
    return out


def match(scope: Scope) -> tuple[_Route, list[UUID]] | None:
    """The hot route and its ids, or None (→ the framework)."""
    if scope["type"] != "http" or scope.get("query_string") or scope.get("root_path"):
        return None
    method = scope["method"]
    if method != "POST" and method != "PUT":
        return None
    parts = scope["path"].split("/")
    # "", "api", "v1", "workspaces", ws, kind, id, …
    n = len(parts)
    if n not in (8, 10) or parts[1] != "api" or parts[2] != "v1" or parts[3] != "workspaces":
        return None
    kind, last = parts[5], parts[-1]
    route: _Route | None = None
    ids: list[UUID] | None = None
    if method == "POST":
        if kind == "job-agents" and last == "claim":
            if n == 8:
                route, ids = _CLAIM_NEXT, _uuids(parts[4], parts[6])
            elif parts[7] == "jobs":
                route, ids = _CLAIM, _uuids(parts[4], parts[6], parts[8])
        elif kind == "jobs" and n == 8 and last == "heartbeat":
            route, ids = _HEARTBEAT, _uuids(parts[4], parts[6])
    elif kind == "jobs" and n == 8 and last == "status":
        route, ids = _STATUS, _uuids(parts[4], parts[6])
    if route is None or ids is None:
        return None
    return route, ids


# --- serving ------------------------------------------------------------------------------------


class FastPath:
    def __init__(
        self, service: JobService, auth: Authenticator, metrics: Metrics, max_body_bytes: int
    ) -> None:
        self.service = service
        self.auth = auth
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def handle(
        self, scope: Scope, receive: Receive, send: Send, route: _Route, ids: list[UUID]
    ) -> Receive | None:
        """Serve the request; or return a ``receive`` replaying the body for the framework."""
        started = time.perf_counter()
        status = 500
        content = b""
        try:
            api_key: str | None = None
            declared = 0
            for name, value in scope["headers"]:
                if name == b"x-api-key":
                    api_key = value.decode("latin-1")
                elif name == b"content-length" and value.isdigit():
                    declared = int(value)
            principal = await self.auth.authenticate(api_key)
            if declared > self.max_body_bytes:
                raise self._too_large()
            body = await self._read_body(receive)
            if body is None:
                return None  # the client went away
            if body:
                try:
                    parsed: Any = route.model.model_validate_json(body)
                except PydanticValidationError:
                    return _replay(body, receive)  # the framework words the 400
            elif route.body_required:
                return _replay(body, receive)
            else:
                parsed = None
            status, content = await route.call(self.service, principal, ids, parsed, receive)
        except JobAgentError as exc:
            status, content = exc.status, exception_bytes(exc)
        except Exception:
            # Same answer as the framework's handler: details only in the server log.
            logger.exception("unhandled error on %s %s", scope["method"], route.template)
            status, content = 500, error_bytes("internal server error", "INTERNAL_ERROR", None)
        try:
            headers = [(b"content-length", str(len(content)).encode())]
            if status != 204:
                headers.append((b"content-type", b"application/json"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": content})
        finally:
            self.metrics.request_latency.labels(
                scope["method"], route.template, str(status)
            ).observe(time.perf_counter() - started)
        return None

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body exceeds {self.max_body_bytes} bytes",
            details={"maxBodyBytes": self.max_body_bytes},
        )

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
