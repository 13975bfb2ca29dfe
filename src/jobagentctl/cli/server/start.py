"""`jobagentctl server start`: the API and the reaper, migrating first."""

from __future__ import annotations

import typer

from jobagentctl.cli.server._common import database_option

__all__ = ["register"]


def start(
    database: str | None = database_option(),
    host: str | None = typer.Option(
        None,
        "--host",
        help="Address to bind [env JOBAGENTCTL_SERVER_HOST; 127.0.0.1].",
        show_default=False,
    ),
    port: int | None = typer.Option(
        None, "--port", help="Port to bind [env JOBAGENTCTL_SERVER_PORT; 8080].", show_default=False
    ),
    lease_seconds: int | None = typer.Option(
        None,
        "--lease-seconds",
        help="Default lease [JOBAGENTCTL_SERVER_LEASE_SECONDS; 60].",
        show_default=False,
    ),
    reap_interval: float | None = typer.Option(
        None,
        "--reap-interval",
        help="Seconds between reaper passes; 0 disables [JOBAGENTCTL_SERVER_REAP_INTERVAL; 5].",
        show_default=False,
    ),
    max_reclaims: int | None = typer.Option(
        None,
        "--max-reclaims",
        help="Fail a job at its N-th lease expiry; 0 = never [JOBAGENTCTL_SERVER_MAX_RECLAIMS; 0].",
        show_default=False,
    ),
    require_claim_id: bool | None = typer.Option(
        None,
        "--require-claim-id/--no-require-claim-id",
        help="Agent keys must send claimId on leased jobs [JOBAGENTCTL_SERVER_REQUIRE_CLAIM_ID].",
        show_default=False,
    ),
    max_wait_seconds: float | None = typer.Option(
        None,
        "--max-wait-seconds",
        help="Cap of a claim-next long-poll [JOBAGENTCTL_SERVER_MAX_WAIT_SECONDS; 30].",
        show_default=False,
    ),
) -> None:
    """Run the API and the reaper; migrate first. SIGTERM/SIGINT drain in-flight requests.

    Every setting also comes from JOBAGENTCTL_SERVER_* (e.g. JOBAGENTCTL_SERVER_MIN_LEASE_SECONDS).

    Example: jobagentctl server start --database postgresql://jobagent@db:5432/jobagent --port 8080
    """
    from jobagentctl.cli.server._common import server_settings
    from jobagentctl.errors import JobAgentError
    from jobagentctl.server.runner import run_server

    settings = server_settings(
        database=database,
        host=host,
        port=port,
        lease_seconds=lease_seconds,
        reap_interval=reap_interval,
        max_reclaims=max_reclaims,
        require_claim_id=require_claim_id,
        max_wait_seconds=max_wait_seconds,
    )
    try:
        run_server(settings)
    except OSError as exc:
        raise JobAgentError(f"server failed: {exc}") from None


def register(app: typer.Typer) -> None:
    app.command("start")(start)
