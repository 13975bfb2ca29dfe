"""The one exception tree of jobagentctl, shared by client and server.

Each class carries its wire ``code`` (the ``code`` of the API's error body) and the HTTP status the
server answers with. It also carries the CLI exit code a script branches on (README.md, "Exit
codes"). The tree::

    JobAgentError                    1   base; unexpected errors
    ├── UsageError                   2   bad flag, bad duration, bad config
    │   └── ConfigError              2   settings or config file unusable (missing URL/key/…)
    │       └── SchemaTooNew         2   503 SCHEMA_TOO_NEW: the database's schema is newer than
    │                                    this release runs on (server start, /readyz)
    ├── ValidationError              2   400 VALIDATION_ERROR: the request was malformed
    │   └── PayloadTooLarge          2   413 PAYLOAD_TOO_LARGE
    ├── ServerUnavailable            3   cannot connect, timeout, 502/503/504
    ├── TlsError                     3   the server's certificate is not trusted (not retried)
    ├── AuthError                    4   401/403 UNAUTHORIZED, or no API key configured;
    │                                    redact add: the socket's listener is not the job's run
    ├── NotFound                     5   404 NOT_FOUND (also: outside the key's scope)
    │   ├── LogNotFound              5   404 LOG_NOT_FOUND: no such job or attempt (log routes)
    │   └── LogExpired               5   410 LOG_EXPIRED: the log was deleted by retention
    ├── Conflict                     6   409
    │   ├── NotClaimable             6   409 NOT_CLAIMABLE: the job is not queued
    │   ├── ClaimLost                6   409 CLAIM_LOST: no claim row (reaped, released, …)
    │   ├── ClaimMismatch            6   409 CLAIM_MISMATCH: another attempt holds the claim
    │   └── JobTerminal              6   409 JOB_TERMINAL: the job already ended
    ├── ServerError                  1   500 INTERNAL_ERROR, any other 5xx
    ├── ProtocolError                1   malformed or unexpected response
    │   ├── LeaseUnsupported         1   the server has no V2 lease support
    │   └── LogsUnsupported          1   the server has no log endpoint
    └── CommandOutcome               1   a command's result, not a wire error: no server sends one
        ├── NoJob                    7   nothing queued to claim (claim-next answered 204)
        ├── StuckClaims              6   inspect-claims --fail-if-stuck found some
        └── AttemptFailed            8   jobs logs --follow: the attempt did not succeed

Exit codes are decided only through :func:`exit_code_for`; a test walks the tree and fails if a
class has none.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AttemptFailed",
    "AuthError",
    "ClaimLost",
    "ClaimMismatch",
    "CommandOutcome",
    "ConfigError",
    "Conflict",
    "JobAgentError",
    "JobTerminal",
    "LeaseUnsupported",
    "LogExpired",
    "LogNotFound",
    "LogsUnsupported",
    "NoJob",
    "NotClaimable",
    "NotFound",
    "PayloadTooLarge",
    "ProtocolError",
    "SchemaTooNew",
    "ServerError",
    "ServerUnavailable",
    "StuckClaims",
    "TlsError",
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

    def __init_subclass__(
        cls, *, code: str, http_status: int | None = None, exit_code: int | None = None
    ) -> None:
        """Each class names its wire ``code`` in its ``class`` line, so none is forgotten. It names
        its HTTP status and exit code where they differ from its parent's."""
        super().__init_subclass__()
        cls.code = code
        if http_status is not None:
            cls.http_status = http_status
        if exit_code is not None:
            cls.exit_code = exit_code

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


class UsageError(JobAgentError, code="USAGE_ERROR", http_status=400, exit_code=2):
    """A bad flag, duration or argument: the command line must change."""


class ConfigError(UsageError, code="CONFIG_ERROR"):
    """The settings or config file are unusable (no URL, no workspace, bad profile)."""


class SchemaTooNew(ConfigError, code="SCHEMA_TOO_NEW", http_status=503):
    """The database was migrated by a newer release past this one's window: this release must not
    serve it. A migration above this release's newest is not expand-only."""


class ValidationError(JobAgentError, code="VALIDATION_ERROR", http_status=400, exit_code=2):
    """The server refused the request as malformed."""


class PayloadTooLarge(ValidationError, code="PAYLOAD_TOO_LARGE", http_status=413):
    """The request body is over the server's size limit."""


class ServerUnavailable(JobAgentError, code="SERVICE_UNAVAILABLE", http_status=503, exit_code=3):
    """No answer: connection refused, timeout, or a 502/503/504 on the way."""


class TlsError(JobAgentError, code="TLS_ERROR", http_status=502, exit_code=3):
    """The TLS handshake failed: the server's certificate is untrusted, expired or for another
    name. Like an unreachable server (exit 3), but retrying does not heal it."""


class AuthError(JobAgentError, code="UNAUTHORIZED", http_status=401, exit_code=4):
    """No API key, or one the server does not accept for this request."""


class NotFound(JobAgentError, code="NOT_FOUND", http_status=404, exit_code=5):
    """No such job, agent or workspace, or one outside the key's scope."""


class LogNotFound(NotFound, code="LOG_NOT_FOUND"):
    """No such job or attempt, answered by a log route. Its own code tells a client that the route
    exists; a server without it answers a plain 404."""


class LogExpired(NotFound, code="LOG_EXPIRED", http_status=410):
    """The attempt's log was deleted by the server's log retention."""


class Conflict(JobAgentError, code="CONFLICT", http_status=409, exit_code=6):
    """The request contradicts the job's state."""


class NotClaimable(Conflict, code="NOT_CLAIMABLE"):
    """The job is not queued, so it cannot be claimed."""


class ClaimLost(Conflict, code="CLAIM_LOST"):
    """The claim is gone (reaped, released, cancelled): stop working on the job."""

    @property
    def job_status(self) -> str | None:
        """The job's status when the claim was found gone (``details.jobStatus``)."""
        value = (self.details or {}).get("jobStatus")
        return value if isinstance(value, str) else None


class ClaimMismatch(Conflict, code="CLAIM_MISMATCH"):
    """Another attempt holds the job's claim now."""


class JobTerminal(Conflict, code="JOB_TERMINAL"):
    """The job has already ended; its status cannot change."""


class ServerError(JobAgentError, code="INTERNAL_ERROR", http_status=500, exit_code=1):
    """The server failed (500 or another 5xx)."""


class ProtocolError(JobAgentError, code="PROTOCOL_ERROR", http_status=502, exit_code=1):
    """The server's answer is malformed or not one the protocol allows."""


class LeaseUnsupported(ProtocolError, code="LEASE_UNSUPPORTED"):
    """The server has no lease support (a V1-only server)."""


class LogsUnsupported(ProtocolError, code="LOGS_UNSUPPORTED"):
    """The server has no log endpoint (ctrlplane, or a jobagentctl before live output)."""


class CommandOutcome(JobAgentError, code="COMMAND_OUTCOME"):
    """A command's result that a script branches on by its exit code.

    It is not an error a server answers: no server raises one, and no wire code maps to one.
    """


class NoJob(CommandOutcome, code="NO_JOB", http_status=204, exit_code=7):
    """Nothing queued to claim. Its status is the 204 that claim-next answered."""


class StuckClaims(CommandOutcome, code="STUCK_CLAIMS", exit_code=6):
    """inspect-claims --fail-if-stuck found expired, unleased or stale claims."""


class AttemptFailed(CommandOutcome, code="ATTEMPT_FAILED", exit_code=8):
    """``jobs logs --follow`` saw the attempt end without succeeding."""


_BY_CODE: dict[str, type[JobAgentError]] = {
    cls.code: cls
    for cls in (
        ValidationError,
        PayloadTooLarge,
        AuthError,
        NotFound,
        LogNotFound,
        LogExpired,
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
    if http_status in (404, 410):
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
    """The CLI exit code for any exception (130 for Ctrl-C, as shells do). This is the one place it
    is decided, so a script can tell what went wrong by the code alone."""
    if isinstance(exc, JobAgentError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1
