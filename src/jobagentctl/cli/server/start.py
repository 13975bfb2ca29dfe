"""`jobagentctl server start`: the API and the reaper, migrating first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from jobagentctl.cli.server._common import (
    DatabaseFlag,
    UpstreamKeyFileFlag,
    UpstreamUrlFlag,
)

__all__ = ["register"]


def _setting(flag: str, help: str) -> Any:
    """A flag over a server setting, unset unless given. The env and the default then hold, as its
    help says, so no default of Typer's is shown."""
    return typer.Option(flag, help=help, show_default=False)


Host = Annotated[
    str | None, _setting("--host", "Address to bind [env JOBAGENTCTL_SERVER_HOST; 127.0.0.1].")
]
Port = Annotated[
    int | None, _setting("--port", "Port to bind [env JOBAGENTCTL_SERVER_PORT; 8080].")
]
LeaseSeconds = Annotated[
    int | None,
    _setting("--lease-seconds", "Default lease [JOBAGENTCTL_SERVER_LEASE_SECONDS; 60]."),
]
ReapInterval = Annotated[
    float | None,
    _setting(
        "--reap-interval",
        "Seconds between reaper passes; 0 disables [JOBAGENTCTL_SERVER_REAP_INTERVAL; 5].",
    ),
]
MaxReclaims = Annotated[
    int | None,
    _setting(
        "--max-reclaims",
        "Fail a job at its N-th lease expiry; 0 = never [JOBAGENTCTL_SERVER_MAX_RECLAIMS; 0].",
    ),
]
RequireClaimId = Annotated[
    bool | None,
    _setting(
        "--require-claim-id/--no-require-claim-id",
        "Agent keys must send claimId on leased jobs [JOBAGENTCTL_SERVER_REQUIRE_CLAIM_ID].",
    ),
]
MaxWaitSeconds = Annotated[
    float | None,
    _setting(
        "--max-wait-seconds",
        "Cap of a claim-next long-poll [JOBAGENTCTL_SERVER_MAX_WAIT_SECONDS; 30].",
    ),
]
LogMaxBytes = Annotated[
    int | None,
    _setting(
        "--log-max-bytes",
        "Most bytes one attempt's log keeps (then: head, marker, newest) "
        "[JOBAGENTCTL_SERVER_LOG_MAX_BYTES; 10485760].",
    ),
]
LogRetention = Annotated[
    str | None,
    _setting(
        "--log-retention",
        "Delete an attempt's log this long after it ended, e.g. 30d, 12h, inf "
        "[JOBAGENTCTL_SERVER_LOG_RETENTION; 30d].",
    ),
]

PresenceInterval = Annotated[
    float | None,
    _setting(
        "--presence-interval",
        "Seconds between two writes of one agent's last-seen time by this server; 0 = every "
        "request [JOBAGENTCTL_SERVER_PRESENCE_INTERVAL; 15].",
    ),
]
PresenceWindow = Annotated[
    float | None,
    _setting(
        "--presence-window",
        "An agent seen within this many seconds is idle, else offline "
        "[JOBAGENTCTL_SERVER_PRESENCE_WINDOW; 90].",
    ),
]
TlsCert = Annotated[
    Path | None,
    _setting(
        "--tls-cert",
        "Serve HTTPS with this PEM certificate (chain after the leaf) "
        "[JOBAGENTCTL_SERVER_TLS_CERT].",
    ),
]
TlsKey = Annotated[
    Path | None,
    _setting("--tls-key", "The certificate's PEM private key [JOBAGENTCTL_SERVER_TLS_KEY]."),
]
BehindProxy = Annotated[
    str | None,
    _setting(
        "--behind-proxy",
        "A TLS-terminating proxy is in front: trust X-Forwarded-* only from these "
        "addresses, ADDR[,ADDR] [JOBAGENTCTL_SERVER_BEHIND_PROXY].",
    ),
]


def start(  # noqa: PLR0913 - a Typer command: its parameters are its flags
    database: DatabaseFlag = None,
    host: Host = None,
    port: Port = None,
    lease_seconds: LeaseSeconds = None,
    reap_interval: ReapInterval = None,
    max_reclaims: MaxReclaims = None,
    require_claim_id: RequireClaimId = None,
    max_wait_seconds: MaxWaitSeconds = None,
    log_max_bytes: LogMaxBytes = None,
    log_retention: LogRetention = None,
    presence_interval: PresenceInterval = None,
    presence_window: PresenceWindow = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    behind_proxy: BehindProxy = None,
    upstream_url: UpstreamUrlFlag = None,
    upstream_key_file: UpstreamKeyFileFlag = None,
) -> None:
    """Run the API and the reaper; migrate first. SIGTERM/SIGINT drain in-flight requests.

    Every setting also comes from JOBAGENTCTL_SERVER_* (e.g. JOBAGENTCTL_SERVER_MIN_LEASE_SECONDS).

    Example: jobagentctl server start --database postgresql://jobagent@db:5432/jobagent --port 8080

    HTTPS: jobagentctl server start --host 0.0.0.0 --tls-cert server.pem --tls-key server.key

    Gateway in front of ctrlplane (docs/gateway.md): jobagentctl server start --upstream-url
    http://ctrlplane:3000 --upstream-key-file /run/secrets/ctrlplane-key
    """
    from jobagentctl.cli.server._common import server_settings
    from jobagentctl.errors import JobAgentError
    from jobagentctl.server.http.runner import run_server

    settings = server_settings(
        database=database,
        host=host,
        port=port,
        lease_seconds=lease_seconds,
        reap_interval=reap_interval,
        max_reclaims=max_reclaims,
        require_claim_id=require_claim_id,
        max_wait_seconds=max_wait_seconds,
        log_max_bytes=log_max_bytes,
        log_retention=log_retention,
        presence_interval=presence_interval,
        presence_window=presence_window,
        tls_cert=tls_cert,
        tls_key=tls_key,
        behind_proxy=behind_proxy,
        upstream_url=upstream_url,
        upstream_key_file=upstream_key_file,
    )
    if settings.gateway:
        settings.upstream_key()  # no key: exit 2 now, not at the first request
    if settings.tls_cert is not None and (expired := _expired(settings.tls_cert)) is not None:
        from jobagentctl.cli.messages import warn

        warn(
            f"TLS certificate {settings.tls_cert} expired on {expired}: clients will refuse "
            "it; renew it (SIGHUP loads the new one without a restart)"
        )
    try:
        run_server(settings)
    except OSError as exc:
        raise JobAgentError(f"server failed: {exc}") from None


def _expired(cert: Path) -> str | None:
    """When the certificate ``cert`` (its first, the leaf) expired (RFC 3339). None while it is
    valid or cannot be read; the server then says what is wrong with the file. The standard library
    decodes a certificate only through this private helper. It has done so unchanged since Python
    3.4; a version without it just gives no warning."""
    import ssl
    from datetime import UTC, datetime

    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        ends = ssl.cert_time_to_seconds(decode(str(cert))["notAfter"])
    except (OSError, ValueError, KeyError, ssl.SSLError):
        return None
    if ends > datetime.now(UTC).timestamp():
        return None
    return datetime.fromtimestamp(ends, UTC).isoformat().replace("+00:00", "Z")


def register(app: typer.Typer) -> None:
    """Add ``server start`` to the ``server`` group."""
    app.command("start")(start)
