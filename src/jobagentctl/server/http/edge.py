"""The HTTP edge: one admission step and one response step for every request.

Admission (``/api/v1/*`` only):

- the API key is verified once, before routing and validation. A caller without a valid key gets 401
  and learns nothing, not even that its path or body was malformed.
- the body is read up to ``max_body_bytes``.
- its JSON nesting is checked against ``max_json_depth``.

The admitted request then goes to the fast path (``fastpath.py``) when it is a hot route. Else, or
when the fast path hands it back, it goes to the framework. The principal is in the scope and the
body replayed: never authenticated or read twice.

The response step records the latency metric (method, route template, status) and logs every
5xx, whichever path answered. An exception is answered by ``failures.error_response`` on both paths
(the framework's handlers call it too). An unexpected one is logged here, once, with its traceback,
whichever path raised it.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from jobagentctl.errors import JobAgentError, PayloadTooLarge, ValidationError
from jobagentctl.routes import V1_PREFIX
from jobagentctl.server.http.auth import Authenticator, Principal
from jobagentctl.server.http.encoding import RETRY_AFTER, Result
from jobagentctl.server.http.failures import error_response, log_unexpected
from jobagentctl.server.http.fastpath import FastPath, match
from jobagentctl.server.http.metrics import Metrics

__all__ = ["PRINCIPAL", "Edge", "json_too_deep"]

logger = logging.getLogger("jobagentctl.server")

PRINCIPAL = "jobagentctl.principal"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_UNMATCHED = "unmatched"

# A JSON string literal (escapes included): brackets inside strings do not nest.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_TO_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_too_deep(body: bytes, limit: int) -> bool:
    """True when the JSON text ``body`` nests arrays/objects more than ``limit`` levels (the
    top-level value is level 1). Linear in the body, C-speed: at most ``limit`` passes of
    ``bytes.replace`` over the brackets alone. Malformed JSON is left to the parser."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    if b'"' in body:
        body = _STRING.sub(b"", body)
    brackets = body.translate(_TO_SQUARE, _NOT_BRACKETS)
    for _ in range(limit):
        if b"[]" not in brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    # Every pair of height ≤ limit is gone: a pair left means deeper nesting.
    return b"[]" in brackets


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that delivers ``body`` once, then the connection's own messages (so a
    long-poll still sees ``http.disconnect``)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _route_template(scope: Scope) -> str:
    """The template of the framework route that matched, once routing has run."""
    route: Any = scope.get("route")
    return getattr(route, "path", None) or _UNMATCHED


class _Disconnected(Exception):
    """The client went away while sending its body: nobody to answer."""


@dataclass(eq=False, slots=True)
class Edge:
    """The ASGI entry point in front of the framework app (see the module docstring)."""

    # The framework app: its routes, its lifespan, its ``state`` and its OpenAPI document.
    framework: FastAPI
    _: KW_ONLY
    auth: Authenticator
    metrics: Metrics
    max_body_bytes: int
    max_json_depth: int
    fast_path: FastPath | None
    # The latency histogram's child per (method, template, status), made once per label set.
    _latency: dict[tuple[str, str, int], Any] = field(default_factory=dict, init=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.framework(scope, receive, send)
            return
        started = time.perf_counter()
        if not scope["path"].startswith(V1_PREFIX):
            await self._framework(scope, receive, send, started)
            return
        hot = match(scope)
        template = hot[0].endpoint.template if hot is not None else _UNMATCHED
        try:
            principal, body = await self._admit(scope, receive)
            if hot is not None and self.fast_path is not None:
                result = await self.fast_path.serve(hot[0], hot[1], principal, body, receive)
                if result is not None:
                    await self._respond(scope, send, started, template, result)
                    return
        except _Disconnected:
            return
        except Exception as exc:
            if not isinstance(exc, JobAgentError):
                log_unexpected(exc, scope["method"], template)
            await self._respond(scope, send, started, template, error_response(exc))
            return
        await self._framework(scope, _replay(body, receive), send, started)

    # --- admission ----------------------------------------------------------------------------
    async def _admit(self, scope: Scope, receive: Receive) -> tuple[Principal, bytes]:
        api_key: str | None = None
        declared: int | None = None
        foreign_type = False
        for name, value in scope["headers"]:
            if name == b"x-api-key":
                api_key = value.decode("latin-1")
            elif name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise ValidationError("invalid Content-Length header") from None
            elif name == b"content-type" and b"json" not in value.lower():
                foreign_type = True
        if foreign_type:
            # Bodies are JSON whatever the client labelled them (`curl -d` says form data).
            scope["headers"] = [
                (n, b"application/json" if n == b"content-type" else v) for n, v in scope["headers"]
            ]
        principal = await self.auth.authenticate(api_key)
        scope[PRINCIPAL] = principal
        if declared is not None and declared > self.max_body_bytes:
            raise self._too_large()
        if scope["method"] not in _BODY_METHODS:
            return principal, b""
        body = await self._read_body(receive)
        if body and json_too_deep(body, self.max_json_depth):
            raise ValidationError(
                f"JSON nested deeper than {self.max_json_depth} levels",
                details={"maxJsonDepth": self.max_json_depth},
            )
        return principal, body

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request body exceeds {self.max_body_bytes} bytes",
            details={"maxBodyBytes": self.max_body_bytes},
        )

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks) if len(chunks) != 1 else chunks[0]

    # --- the response step --------------------------------------------------------------------
    async def _respond(
        self, scope: Scope, send: Send, started: float, template: str, result: Result
    ) -> None:
        status, content = result
        try:
            headers = [(b"content-length", str(len(content)).encode())]
            if status != 204:
                headers.append((b"content-type", b"application/json"))
            if status == 503:
                headers.append((b"retry-after", RETRY_AFTER.encode()))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": content})
        finally:
            self._record(scope, template, status, started)

    async def _framework(self, scope: Scope, receive: Receive, send: Send, started: float) -> None:
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.framework(scope, receive, send_status)
        except Exception as exc:
            # The framework has answered it (error_response, via its handler) and raises it
            # again for the server to log: that is done here, and nowhere else.
            log_unexpected(exc, scope["method"], _route_template(scope))
        finally:
            self._record(scope, _route_template(scope), status, started)

    def _record(self, scope: Scope, template: str, status: int, started: float) -> None:
        method = scope["method"]
        key = (method, template, status)
        child = self._latency.get(key)
        if child is None:
            # labels() takes a lock and builds the label tuple: once per label set, not per
            # request (the set is bounded: methods × route templates × statuses).
            child = self.metrics.request_latency.labels(method, template, str(status))
            self._latency[key] = child
        child.observe(time.perf_counter() - started)
        if status >= 500:
            logger.warning("%s %s → %d", method, template, status)
