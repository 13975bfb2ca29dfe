"""The one exception tree of jobagentctl, shared by client and server.

Each class carries its wire ``code`` (the ``code`` of the API's error body), the HTTP status the
server answers with, and the CLI exit code of SPEC §7. The tree::

    JobAgentError                    1   base; unexpected errors
    ├── UsageError                   2   bad flag, bad duration, bad config
    │   └── ConfigError              2   settings or config file unusable (missing URL/key/…)
    ├── ValidationError              2   400 VALIDATION_ERROR: the request was malformed
    │   └── PayloadTooLarge          2   413 PAYLOAD_TOO_LARGE
    ├── ServerUnavailable            3   cannot connect, timeout, 502/503/504
    ├── AuthError                    4   401/403 UNAUTHORIZED, or no API key configured
    ├── NotFound                     5   404 NOT_FOUND (also: outside the key's scope)
    ├── Conflict                     6   409
    │   ├── NotClaimable             6   409 NOT_CLAIMABLE: the job is not queued
    │   ├── ClaimLost                6   409 CLAIM_LOST: no claim row (reaped, released, …)
    │   ├── ClaimMismatch            6   409 CLAIM_MISMATCH: another attempt holds the claim
    │   ├── JobTerminal              6   409 JOB_TERMINAL: the job already ended
    │   └── StuckClaims              6   inspect-claims --fail-if-stuck found some
    ├── NoJob                        7   nothing queued to claim (claim-next answered 204)
    ├── ServerError                  1   500 INTERNAL_ERROR, any other 5xx
    └── ProtocolError                1   malformed or unexpected response
        └── LeaseUnsupported         1   the server has no V2 lease support

Exit codes are decided only through :func:`exit_code_for`; a test walks the tree and fails if a
class has none.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AuthError",
    "ClaimLost",
    "ClaimMismatch",
    "ConfigError",
    "Conflict",
    "JobAgentError",
    "JobTerminal",
    "LeaseUnsupported",
    "NoJob",
    "NotClaimable",
    "NotFound",
    "PayloadTooLarge",
    "ProtocolError",
    "ServerError",
    "ServerUnavailable",
    "StuckClaims",
    "UsageError",
    "ValidationError",
    "error_for_code",
    "exit_code_for",
]


class JobAgentError(Exception):
    """Base of every error jobagentctl raises on purpose."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    http_status: ClassVar[int] = 500
    exit_code: ClassVar[int] = 1

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        # The HTTP status actually seen (client side) or to answer with (server side).
        self.status = status if status is not None else self.http_status
        # Only the status a server really answered with; None for local errors (a bad flag, a
        # refused connection, a timeout, the admin commands' own database work).
        self.response_status = status

    def body(self) -> dict[str, Any]:
        """The API's error body: ``{"message", "code", "details"}``."""
        return {"message": self.message, "code": self.code, "details": self.details}


class UsageError(JobAgentError):
    code = "USAGE_ERROR"
    http_status = 400
    exit_code = 2


class ConfigError(UsageError):
    code = "CONFIG_ERROR"


class ValidationError(JobAgentError):
    code = "VALIDATION_ERROR"
    http_status = 400
    exit_code = 2


class PayloadTooLarge(ValidationError):
    code = "PAYLOAD_TOO_LARGE"
    http_status = 413


class ServerUnavailable(JobAgentError):
    code = "SERVICE_UNAVAILABLE"
    http_status = 503
    exit_code = 3


class AuthError(JobAgentError):
    code = "UNAUTHORIZED"
    http_status = 401
    exit_code = 4


class NotFound(JobAgentError):
    code = "NOT_FOUND"
    http_status = 404
    exit_code = 5


class Conflict(JobAgentError):
    code = "CONFLICT"
    http_status = 409
    exit_code = 6


class NotClaimable(Conflict):
    code = "NOT_CLAIMABLE"


class ClaimLost(Conflict):
    code = "CLAIM_LOST"

    @property
    def job_status(self) -> str | None:
        """The job's status when the claim was found gone (``details.jobStatus``)."""
        value = (self.details or {}).get("jobStatus")
        return value if isinstance(value, str) else None


class ClaimMismatch(Conflict):
    code = "CLAIM_MISMATCH"


class JobTerminal(Conflict):
    code = "JOB_TERMINAL"


class StuckClaims(Conflict):
    code = "STUCK_CLAIMS"


class NoJob(JobAgentError):
    code = "NO_JOB"
    http_status = 204
    exit_code = 7


class ServerError(JobAgentError):
    code = "INTERNAL_ERROR"
    http_status = 500
    exit_code = 1


class ProtocolError(JobAgentError):
    code = "PROTOCOL_ERROR"
    http_status = 502
    exit_code = 1


class LeaseUnsupported(ProtocolError):
    code = "LEASE_UNSUPPORTED"


_BY_CODE: dict[str, type[JobAgentError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        PayloadTooLarge,
        AuthError,
        NotFound,
        Conflict,
        NotClaimable,
        ClaimLost,
        ClaimMismatch,
        JobTerminal,
        ServerUnavailable,
        ServerError,
    )
}


def error_for_code(code: str | None, http_status: int) -> type[JobAgentError]:
    """The class for an error body's ``code``, falling back on the HTTP status."""
    if code and code in _BY_CODE:
        return _BY_CODE[code]
    if http_status in (401, 403):
        return AuthError
    if http_status == 404:
        return NotFound
    if http_status == 409:
        return Conflict
    if http_status == 413:
        return PayloadTooLarge
    if http_status in (400, 422):
        return ValidationError
    if http_status in (502, 503, 504):
        return ServerUnavailable
    if http_status >= 500:
        return ServerError
    return ProtocolError


def exit_code_for(exc: BaseException) -> int:
    """The CLI exit code for any exception (SPEC §7): the one place it is decided."""
    if isinstance(exc, JobAgentError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1
