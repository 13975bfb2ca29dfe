"""`jobagentctl heartbeat`: extend the lease of a claimed job once."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state

__all__ = ["register"]


def heartbeat(
    ctx: typer.Context,
    job_id: str | None = typer.Argument(
        None, metavar="JOB_ID", help="The claimed job (default: $JOBAGENTCTL_JOB_ID)."
    ),
    claim_id: str | None = typer.Option(
        None,
        "--claim-id",
        metavar="ID",
        help="The claim to extend (default: $JOBAGENTCTL_CLAIM_ID).",
    ),
    lease_seconds: int | None = typer.Option(
        None, "--lease-seconds", min=1, metavar="N", help="Ask for a new lease length."
    ),
) -> None:
    """Send one heartbeat: the lease runs for another lease length from now.

    Exit 6 when the claim is gone (reaped, released, cancelled) or held by another attempt:
    stop working on the job then.

    \b
    Example:
      claim=$(jobagentctl claim -o env) && eval "$claim"
      while sleep 20; do jobagentctl heartbeat >/dev/null || break; done &
    """
    import os

    from jobagentctl.cli import output
    from jobagentctl.cli.params import env_or, uuid_arg
    from jobagentctl.errors import LeaseUnsupported
    from jobagentctl.settings import CLAIM_ID_ENV, JOB_ID_ENV

    state = get_state(ctx)
    job = uuid_arg(env_or(job_id, JOB_ID_ENV, "JOB_ID"), "JOB_ID")
    claim_text = claim_id if claim_id is not None else os.environ.get(CLAIM_ID_ENV)
    if claim_text == "":
        # `claim -o env` exports an empty claim id when the server granted no lease.
        raise LeaseUnsupported(
            f"server has no lease support: the claim of job {job} has no claim id "
            "(a V1 claim), so there is no lease to extend"
        )
    claim = uuid_arg(claim_text, "--claim-id") if claim_text is not None else None
    with state.client() as client:
        beat = client.heartbeat(job, claim_id=claim, lease_seconds=lease_seconds)
    output.emit(state, "heartbeat", beat)


def register(app: typer.Typer) -> None:
    app.command("heartbeat")(heartbeat)
