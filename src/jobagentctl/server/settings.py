"""Server settings: one pydantic-settings object, one ``JOBAGENTCTL_SERVER_*`` variable per flag.

Flags of ``jobagentctl server start`` override the environment; the environment overrides the
defaults below. The database URL is never logged with a password (see :func:`redact_url`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jobagentctl.durations import parse_duration
from jobagentctl.errors import ConfigError, UsageError

__all__ = [
    "ENV_PREFIX",
    "ServerSettings",
    "check_database_url",
    "default_database_url",
    "redact_url",
]

ENV_PREFIX = "JOBAGENTCTL_SERVER_"
MIB = 1024 * 1024


def default_database_url() -> str:
    """``sqlite:///$XDG_DATA_HOME/jobagentctl/jobagent.db`` (XDG default ``~/.local/share``)."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(data_home) / 'jobagentctl' / 'jobagent.db'}"


def check_database_url(url: str) -> str:
    """Reject a URL no store can open, early and with a message that names the accepted forms."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        if not url.startswith("sqlite://"):
            raise ConfigError(
                "bad database URL: SQLite URLs look like sqlite:///path/to/file.db",
                details={"database": redact_url(url)},
            )
        return url
    if scheme in ("postgresql", "postgres"):
        if not urlsplit(url).hostname and "host=" not in url:
            raise ConfigError(
                "bad database URL: PostgreSQL URLs look like postgresql://user@host:5432/db",
                details={"database": redact_url(url)},
            )
        return url
    raise ConfigError(
        "bad database URL: expected sqlite:///PATH or postgresql://user@host:port/db",
        details={"database": redact_url(url)},
    )


def url_has_password(url: str) -> bool:
    """True when a database URL carries a password (``user:pw@`` or ``?password=``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.password is not None or "password" in parse_qs(parts.query)


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe for logs and error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class ServerSettings(BaseSettings):
    """Every knob of the server. Lease times are seconds; the database clock applies them."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    database: str = Field(default_factory=default_database_url)
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    lease_seconds: int = Field(default=60, ge=1)
    min_lease_seconds: int = Field(default=5, ge=1)
    max_lease_seconds: int = Field(default=3600, ge=1)
    reap_interval: float = Field(default=5.0, ge=0)
    reap_batch_size: int = Field(default=1000, ge=1, le=100_000)
    max_reclaims: int = Field(default=0, ge=0)
    require_claim_id: bool = False
    max_wait_seconds: float = Field(default=30.0, ge=0)
    max_body_bytes: int = Field(default=MIB, ge=1024)
    # Deepest nesting of arrays/objects accepted in a JSON body (the top-level value is level
    # 1): anything stored can always be served back (responses wrap it a few levels deeper).
    max_json_depth: int = Field(default=64, ge=2, le=200)
    # Connection limits (connections.py): request line + headers of one request; seconds from a
    # request's first byte to the end of its headers; seconds from the end of the headers to the
    # end of the body; seconds a connection may wait idle for its first or next request; open
    # connections (also kept below the fd limit).
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=MIB)
    header_timeout: float = Field(default=10.0, gt=0)
    body_timeout: float = Field(default=30.0, gt=0)
    keep_alive_timeout: float = Field(default=5.0, gt=0)
    # The idle timeout once a connection has carried a valid API key: longer than an agent's
    # heartbeat interval (lease/3, 20 s by default), so heartbeats reuse their connection.
    keyed_keep_alive_timeout: float = Field(default=75.0, gt=0)
    max_connections: int = Field(default=10_000, ge=1)
    # The event loop of `server start`: uvloop when installed (auto), or one named.
    loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    # Serve the hot endpoints (the agent loop and log appends) without framework routing.
    fast_path: bool = True
    # How long a verified API key is trusted without asking the database again: bounds how late
    # a revocation (possibly done by another replica or by `server revoke-key`) takes effect.
    key_cache_seconds: float = Field(default=2.0, ge=0)
    # Seconds a request may wait for the database before it is answered 503: every operation
    # (PostgreSQL: the pool wait and the statement; SQLite: the worker thread and the database
    # lock another process may hold) and the API-key lookup. A frozen or locked database fails
    # requests fast.
    database_timeout: float = Field(default=5.0, gt=0)
    # Seconds uvicorn waits for in-flight requests on SIGTERM before cancelling them.
    shutdown_timeout: int = Field(default=30, ge=0)
    log_level: str = "info"
    access_log: bool = False
    # Job logs: the most bytes one attempt's log keeps (past it: its head, a truncation marker
    # and its newest output), and how long after an attempt ended its log is kept (seconds; a
    # duration such as 30d from the environment or the flag).
    log_max_bytes: int = Field(default=10 * MIB, ge=4096)
    log_retention: float = Field(default=30 * 86400.0, gt=0)
    # Agent presence (presence.py): each process writes when an agent was last seen at most once
    # per interval; `agents list` shows an agent seen within the window (and holding no job)
    # as idle, else offline. The window should exceed the interval plus the agents' poll period.
    presence_interval: float = Field(default=15.0, ge=0)
    presence_window: float = Field(default=90.0, gt=0)
    # HTTPS: the certificate chain (PEM) and its private key; both or neither (server/http/tls.py).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # A TLS-terminating proxy is in front: the addresses (or CIDRs) whose X-Forwarded-For and
    # X-Forwarded-Proto headers are trusted, comma-separated; nobody else's are.
    behind_proxy: str | None = None
    # Gateway mode (docs/gateway.md): ctrlplane's API in front of which this server runs, and
    # its API key (the environment, or a file: never a flag value, never logged). None: our
    # own server. The poll of an agent's queued jobs while claimers wait (seconds, backing off
    # up to upstream_max_backoff while ctrlplane fails) and the sync of claimed jobs with
    # ctrlplane (seconds between two looks: a job cancelled there ends its claim here within it).
    upstream_url: str | None = None
    upstream_api_key: SecretStr | None = None
    upstream_key_file: Path | None = None
    upstream_poll_interval: float = Field(default=1.0, gt=0, le=60)
    upstream_max_backoff: float = Field(default=30.0, gt=0)
    upstream_sync_interval: float = Field(default=10.0, gt=0)
    # Seconds one request to ctrlplane may take. An outbox row taken by a process is left to
    # it for twice that (plus one second) before another process may take it, and the sync
    # leaves a claim that young alone (its claim request may still be on its way).
    upstream_timeout: float = Field(default=10.0, gt=0, le=300)

    @field_validator("database")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return value.strip()

    @field_validator("log_retention", mode="before")
    @classmethod
    def _log_retention(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_duration(value, name="log retention")
        except UsageError as exc:
            raise ValueError(exc.message) from None

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError("log_level must be one of critical, error, warning, info, debug")
        return value

    @model_validator(mode="after")
    def _lease_bounds(self) -> ServerSettings:
        if self.min_lease_seconds > self.max_lease_seconds:
            raise ValueError("min_lease_seconds must not exceed max_lease_seconds")
        return self

    @field_validator("tls_cert", "tls_key", mode="before")
    @classmethod
    def _tls_path(cls, value: Any) -> Any:
        return None if value is None or str(value).strip() == "" else value

    @field_validator("behind_proxy")
    @classmethod
    def _proxy_addresses(cls, value: str | None) -> str | None:
        if value is None:
            return None
        addresses = [part.strip() for part in value.split(",") if part.strip()]
        return ",".join(addresses) or None

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both, or neither")
        return self

    @field_validator("upstream_url")
    @classmethod
    def _upstream_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname:
            raise ValueError("upstream_url must be an http:// or https:// URL of ctrlplane's API")
        return value

    @field_validator("upstream_key_file", mode="before")
    @classmethod
    def _key_file(cls, value: Any) -> Any:
        return None if value is None or str(value).strip() == "" else value

    @property
    def upstream_hold(self) -> float:
        """Seconds an outbox row (or a fresh claim) is left to the process that has it."""
        return 2 * self.upstream_timeout + 1

    @property
    def gateway(self) -> bool:
        """Whether this server is a gateway in front of ctrlplane (``upstream_url`` set)."""
        return self.upstream_url is not None

    def upstream_key(self) -> str:
        """ctrlplane's API key: ``upstream_api_key``, else the first line of
        ``upstream_key_file``. ``ConfigError`` (exit 2) when neither gives one."""
        if self.upstream_api_key is not None and self.upstream_api_key.get_secret_value():
            return self.upstream_api_key.get_secret_value().strip()
        if self.upstream_key_file is not None:
            try:
                text = self.upstream_key_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the upstream key file {self.upstream_key_file}: "
                    f"{exc.strerror or exc}"
                ) from None
            key = text.strip().splitlines()[0].strip() if text.strip() else ""
            if key:
                return key
            raise ConfigError(f"the upstream key file {self.upstream_key_file} is empty")
        raise ConfigError(
            "gateway mode needs ctrlplane's API key: set JOBAGENTCTL_SERVER_UPSTREAM_API_KEY or "
            "give --upstream-key-file FILE"
        )

    @property
    def tls(self) -> bool:
        """Whether the server speaks HTTPS."""
        return self.tls_cert is not None

    @property
    def proxy_addresses(self) -> list[str]:
        """The addresses ``behind_proxy`` names (empty: forwarded headers are trusted from
        nobody)."""
        return self.behind_proxy.split(",") if self.behind_proxy else []

    def clamp_lease(self, seconds: int) -> int:
        """``seconds`` clamped into ``[min_lease_seconds, max_lease_seconds]``."""
        return max(self.min_lease_seconds, min(self.max_lease_seconds, seconds))

    @property
    def default_lease(self) -> int:
        """The server default lease, clamped into the bounds (a default outside them is moot)."""
        return self.clamp_lease(self.lease_seconds)

    def store_options(self) -> dict[str, Any]:
        """Options of ``open_store`` that come from these settings (per dialect): every
        operation but migrations is bounded by ``database_timeout`` on both databases."""
        if self.database.split(":", 1)[0].lower() in ("postgresql", "postgres"):
            return {
                "pool_timeout": self.database_timeout,
                "statement_timeout": self.database_timeout,
            }
        return {"statement_timeout": self.database_timeout}

    def public_dict(self) -> dict[str, Any]:
        """Settings safe to log: the database password is redacted."""
        data = self.model_dump()
        data["database"] = redact_url(self.database)
        return data
