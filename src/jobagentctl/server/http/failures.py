"""How the server answers a failure, for both HTTP paths.

:func:`error_response` turns any exception into the status and the ``{message, code, details}``
body. The edge calls it for what fails before the framework or on the fast path. The framework's
exception handlers (:func:`add_error_handlers`) call it for the rest. An unexpected exception is a
500 that tells the client nothing. Its one log line, with the traceback, is
:func:`log_unexpected`'s, written by the edge whichever path failed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from jobagentctl.errors import JobAgentError
from jobagentctl.server.http.encoding import error_bytes, json_response

__all__ = ["add_error_handlers", "error_response", "log_unexpected"]

logger = logging.getLogger("jobagentctl.server")

# The codes of the framework's own HTTP errors (an unknown path or method).
_HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 400: "VALIDATION_ERROR"}
_INTERNAL = error_bytes("internal server error", "INTERNAL_ERROR", None)


def error_response(exc: BaseException) -> tuple[int, bytes]:
    """The status and body answering ``exc``:

    - a ``JobAgentError``: its own;
    - a request the framework could not parse: 400 ``VALIDATION_ERROR`` naming the fields;
    - the framework's 404 and 405: the same shape;
    - anything else: 500 ``INTERNAL_ERROR`` (details stay in the log).
    """
    if isinstance(exc, JobAgentError):
        return exc.status, error_bytes(exc.message, exc.code, exc.details)
    if isinstance(exc, RequestValidationError):
        return 400, _validation_error(exc.errors())
    if isinstance(exc, HTTPException):
        message = "not found" if exc.status_code == 404 else str(exc.detail)
        code = _HTTP_CODES.get(exc.status_code, "HTTP_ERROR")
        return exc.status_code, error_bytes(message, code, None)
    return 500, _INTERNAL


def _validation_error(errors: Sequence[Any]) -> bytes:
    fields = []
    for error in errors:
        field = ".".join(str(part) for part in error.get("loc", ()))
        message = "invalid JSON" if error.get("type") == "json_invalid" else error.get("msg", "")
        # The input is not echoed back: it may be large, and it may be something secret.
        fields.append({"field": field, "message": message, "type": error.get("type")})
    names = ", ".join(f["field"] for f in fields) or "request"
    return error_bytes(f"invalid request: {names}", "VALIDATION_ERROR", {"errors": fields})


def log_unexpected(exc: BaseException, method: str, route: str) -> None:
    """Log an unexpected exception once, with its traceback. The line names the method and the
    route template only: never the path's ids, the query, a header or the body."""
    logger.error("unhandled %s on %s %s", type(exc).__name__, method, route, exc_info=exc)


async def _answer(request: Request, exc: Exception) -> Response:
    response = json_response(error_response(exc))
    if isinstance(exc, HTTPException) and exc.headers:
        response.headers.update(exc.headers)  # a 405's Allow
    return response


def add_error_handlers(app: FastAPI) -> None:
    """Answer every exception a route raises with :func:`error_response`. The framework
    re-raises an unexpected one after answering it: the edge logs it then."""
    for kind in (RequestValidationError, JobAgentError, HTTPException, Exception):
        app.add_exception_handler(kind, _answer)
