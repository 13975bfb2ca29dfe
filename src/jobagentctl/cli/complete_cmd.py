"""`jobagentctl complete`: report a job's terminal status, with links for ctrlplane's UI."""

from __future__ import annotations

import typer

from jobagentctl.cli.context import get_state

__all__ = ["LINKS_KEY", "register"]

# ctrlplane shows this metadata key (a JSON object string, label → URL) as links on the job.
LINKS_KEY = "ctrlplane/links"


def complete(
    ctx: typer.Context,
    job_id: str | None = typer.Argument(
        None, metavar="JOB_ID", help="The job (default: $JOBAGENTCTL_JOB_ID)."
    ),
    status: str | None = typer.Option(
        None, "--status", "-s", metavar="S", help="successful, failure, skipped, …"
    ),
    exit_code: int | None = typer.Option(
        None, "--exit-code", metavar="N", help="0 → successful, anything else → failure."
    ),
    message: str | None = typer.Option(None, "--message", "-m", metavar="M", help="Message."),
    claim_id: str | None = typer.Option(
        None, "--claim-id", metavar="ID", help="Fencing token (default: $JOBAGENTCTL_CLAIM_ID)."
    ),
    external_id: str | None = typer.Option(
        None, "--external-id", metavar="X", help="Id of the run in another system."
    ),
    links: list[str] = typer.Option(
        [], "--link", metavar="LABEL=URL", help="A link to show with the job (repeatable)."
    ),
) -> None:
    """Report a terminal status for a job (give exactly one of --status, --exit-code).

    Repeating the same status with the same claim id is a safe retry.

    \b
    Example:
      make build; jobagentctl complete --exit-code $? --link "Logs=$CI_LOG_URL"
    """
    import json

    from jobagentctl.cli import output
    from jobagentctl.cli.params import key_values
    from jobagentctl.cli.status import terminal_status
    from jobagentctl.errors import UsageError
    from jobagentctl.models import JobStatus
    from jobagentctl.settings import job_context

    state = get_state(ctx)
    if (status is None) == (exit_code is None):
        raise UsageError("give exactly one of --status and --exit-code")
    if status is not None:
        final = terminal_status(status)
    else:
        final = JobStatus.SUCCESSFUL if exit_code == 0 else JobStatus.FAILURE
        if exit_code != 0 and message is None:
            message = f"exit code {exit_code}"
    # No claim id (a V1 claim exports an empty one): report without fencing.
    target = job_context(job_id, claim_id)
    metadata = None
    if links:
        metadata = {LINKS_KEY: json.dumps(key_values(links, "--link"))}
    with state.client() as client:
        accepted = client.update_status(
            target.job_id,
            final,
            claim_id=target.claim_id,
            message=message,
            external_id=external_id,
            metadata=metadata,
        )
    output.emit_accepted(state, accepted, f"job {target.job_id}: {final.value}")


def register(app: typer.Typer) -> None:
    app.command("complete")(complete)
