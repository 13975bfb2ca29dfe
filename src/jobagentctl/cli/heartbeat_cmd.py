"""`jobagentctl heartbeat`: extend the lease of a claimed job once."""

from __future__ import annotations

from typing import Annotated

import typer

from jobagentctl.cli.context import get_state

__all__ = ["register"]


def heartbeat(
    ctx: typer.Context,
    job_id: Annotated[
        str | None,
        typer.Argument(metavar="JOB_ID", help="The claimed job (default: $JOBAGENTCTL_JOB_ID)."),
    ] = None,
    claim_id: Annotated[
        str | None,
        typer.Option(
            "--claim-id", metavar="ID", help="The claim to extend (default: $JOBAGENTCTL_CLAIM_ID)."
        ),
    ] = None,
    lease_seconds: Annotated[
        int | None,
        typer.Option("--lease-seconds", min=1, metavar="N", help="Ask for a new lease length."),
    ] = None,
) -> None:
    """Send one heartbeat: the lease runs for another lease length from now.

    Exit 6 when the claim is gone (reaped, released, cancelled) or held by another attempt:
    stop working on the job then. Without a claim id (--claim-id not given,
    JOBAGENTCTL_CLAIM_ID unset or empty) the heartbeat is not fenced.

    A bare `while sleep` loop in the background does not stop the work when the lease is lost
    (nor itself when the script dies): `jobagentctl run -- CMD` does all of that, and the
    README's "A bash agent" shows it done by hand. Between steps that are each shorter than
    the lease, a heartbeat in the foreground is enough:

    \b
    Example:
      claim=$(jobagentctl claim -o env) || exit $?; eval "$claim"
      for step in ./build.sh ./test.sh; do
        jobagentctl heartbeat >/dev/null || exit $?   # 6/5: the claim is gone; stop
        "$step"
      done
    """
    from jobagentctl.cli import output
    from jobagentctl.settings import job_context

    state = get_state(ctx)
    target = job_context(job_id, claim_id)
    with state.client() as client:
        beat = client.heartbeat(
            target.job_id, claim_id=target.claim_id, lease_seconds=lease_seconds
        )
    output.emit(state, "heartbeat", beat)


def register(app: typer.Typer) -> None:
    """Add the ``heartbeat`` command to ``app``."""
    app.command("heartbeat")(heartbeat)
