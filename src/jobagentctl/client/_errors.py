"""Translation of every httpx error and HTTP status into the project's error tree.

:func:`translate` is the one place it happens; the client raises its result ``from`` the cause.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import ValidationError as PydanticValidationError

from jobagentctl.errors import (
    JobAgentError,
    LeaseUnsupported,
    NotFound,
    ProtocolError,
    ServerUnavailable,
    TlsError,
    error_for_code,
)
from jobagentctl.models import ErrorBody

__all__ = ["translate"]

# Statuses that mean "try again later" rather than "your request is wrong".
_RETRY_LATER = frozenset({408, 429})
_SNIPPET = 200


def _error_body(response: httpx.Response) -> tuple[ErrorBody | None, str | None]:
    """Our error shape, if the body has it, else any human message the body carries.

    ctrlplane itself answers ``{"error": "..."}``; proxies answer HTML.
    """
    try:
        data: Any = response.json()
    except ValueError:
        text = response.text.strip()
        return None, (text[:_SNIPPET] if text and not text.startswith("<") else None)
    if isinstance(data, dict):
        try:
            return ErrorBody.model_validate(data), None
        except PydanticValidationError:
            for key in ("error", "message", "detail"):
                if isinstance(data.get(key), str):
                    return None, data[key]
    return None, None


def _from_status(response: httpx.Response, *, v2_route: bool) -> JobAgentError:
    status = response.status_code
    request = response.request
    where = f"{request.method} {request.url.path}"
    body, fallback = _error_body(response)
    ours = body is not None and error_for_code(body.code, 0) is not ProtocolError
    if v2_route and status in (404, 405) and not ours:
        # A 404/405 without one of our error codes, on a route only V2 servers have: the route
        # itself is missing, as on ctrlplane, which has no lease endpoints (its OpenAPI
        # validator answers {"message": "not found", "code": "Not Found", ...}).
        return LeaseUnsupported(
            f"server has no lease support ({where} answered {status}): it speaks only the V1 "
            "pull-agent API; claim jobs by id and skip heartbeats",
            status=status,
        )
    if 300 <= status < 400:
        location = response.headers.get("location", "?")
        return ProtocolError(
            f"unexpected redirect ({status}) from {where} to {location}: check --url",
            status=status,
        )
    generic = body.message if body is not None else fallback
    if status == 404 and (generic is None or generic.strip(" .").lower() == "not found"):
        # A 404 that names nothing: the route itself is unknown here, most often because the
        # base URL has a path of its own (`--url http://host/v2`).
        details = body.details if body is not None else None
        return NotFound(_unknown_route(where, request.url.path), details=details, status=404)
    cls = error_for_code(body.code if body is not None else None, status)
    if cls is ProtocolError and status in _RETRY_LATER:
        cls = ServerUnavailable
    if body is not None:
        return cls(body.message, details=body.details, status=status)
    if cls is NotFound:
        return NotFound(f"not found: {where}" + (f" ({fallback})" if fallback else ""), status=404)
    message = fallback or response.reason_phrase or "error"
    return cls(f"HTTP {status} from {where}: {message}", status=status)


def _unknown_route(where: str, path: str) -> str:
    prefix = path.split("/api/", 1)[0] if "/api/" in path else ""
    if prefix:
        return (
            f"not found: {where}: the server has no such route: check --url (the server's base "
            f"URL, with or without /api): remove {prefix!r} from it"
        )
    # Our server also answers a bare "not found" to a key outside its scope (an agent key on a
    # workspace-only route): both causes are named.
    return (
        f"not found: {where}: no such route on this server, or not one this API key may use "
        "(check --url, and use a workspace key)"
    )


def translate(exc: Exception, *, v2_route: bool = False) -> JobAgentError:
    """The project error for an httpx error, an HTTP error status, or an unreadable body."""
    if isinstance(exc, JobAgentError):
        return exc
    if isinstance(exc, httpx.HTTPStatusError):
        return _from_status(exc.response, v2_route=v2_route)
    if isinstance(exc, httpx.TimeoutException):
        kind = type(exc).__name__.replace("Timeout", " timeout").strip().lower()
        return ServerUnavailable(f"server did not answer in time ({kind}): {exc.request.url}")
    if isinstance(exc, httpx.TransportError):
        where = "the server"
        if _has_request(exc):
            url = exc.request.url
            where = f"the server at {url.scheme}://{url.netloc.decode('ascii', 'replace')}"
        tls = _tls_failure(exc, where)
        if tls is not None:
            return tls
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.RemoteProtocolError) and _has_request(exc):
            url = exc.request.url
            if url.scheme == "http" and _speaks_tls(url.host, url.port or 80):
                https = f"https://{url.netloc.decode('ascii', 'replace')}"
                reason = f"it answered in TLS, not plain HTTP: use {https}"
        return ServerUnavailable(f"cannot reach {where}: {reason}")
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return ProtocolError(f"malformed JSON from the server: {exc}")
    if isinstance(exc, PydanticValidationError):
        first = exc.errors(include_input=False, include_url=False)[:3]
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in first)
        return ProtocolError(f"unexpected response shape from the server: {where}")
    if isinstance(exc, httpx.HTTPError):
        return ProtocolError(f"HTTP error: {exc}")
    return ProtocolError(f"unexpected response: {exc}")


# OpenSSL's verification results (X509_V_ERR_*) that mean "signed by nobody we trust".
_UNTRUSTED = frozenset({2, 18, 19, 20, 21})
_EXPIRED, _NOT_YET_VALID, _NAME_MISMATCH, _IP_MISMATCH = 10, 9, 62, 64
_TRUST_HINT = (
    "trust its CA with --ca-bundle PATH, JOBAGENTCTL_CA_BUNDLE, ca_bundle in the profile, "
    "or SSL_CERT_FILE"
)


def _tls_failure(exc: BaseException, where: str) -> TlsError | None:
    """A :class:`TlsError` naming the server and why its certificate was refused (untrusted
    issuer, expired, another name), when a TLS handshake is what failed; else None."""
    import ssl  # loaded already by then: https is the only way here

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    if isinstance(cause, ssl.SSLCertVerificationError):
        code, message = cause.verify_code, cause.verify_message
        if code in _UNTRUSTED:
            why = f"issued by an authority that is not trusted ({message}); {_TRUST_HINT}"
        elif code == _EXPIRED:
            why = "it has expired; the server needs a renewed certificate"
        elif code == _NOT_YET_VALID:
            why = "it is not valid yet (check the clocks)"
        elif code in (_NAME_MISMATCH, _IP_MISMATCH):
            why = f"it is for another name ({message.rstrip('.')}); use a name it is issued for"
        else:
            why = message or str(cause)
        return TlsError(f"TLS certificate of {where} refused: {why}")
    reason = cause.reason or str(cause)
    if reason == "WRONG_VERSION_NUMBER":
        reason = "the server does not speak TLS there (an http:// URL?)"
    return TlsError(f"TLS handshake with {where} failed: {reason}")


# How long the check that an http:// server speaks TLS may take (it runs only after a failure).
_TLS_PROBE_SECONDS = 2.0


def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a TLS handshake: an http:// URL to an https server is cut
    off without an answer, which says nothing by itself. Only a handshake is attempted (no
    certificate checked, nothing sent after it): what comes back is all that is looked at."""
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=_TLS_PROBE_SECONDS) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except ssl.SSLError as exc:
        # An alert from the server is TLS too; a plain-HTTP answer is WRONG_VERSION_NUMBER.
        return exc.reason not in ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF_WHILE_READING", None)
    except OSError:
        return False


def _has_request(exc: httpx.TransportError) -> bool:
    try:
        exc.request  # noqa: B018 - the property raises when no request is attached
    except RuntimeError:
        return False
    return True
