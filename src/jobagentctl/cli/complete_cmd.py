"""`jobagentctl complete`: report a job's terminal status, with links for ctrlplane's UI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.cli.status import terminal_choices

if TYPE_CHECKING:
    from jobagentctl.models import JobStatus

__all__ = ["LINKS_KEY", "final_status", "register"]

# ctrlplane shows this metadata key (a JSON object string, label → URL) as links on the job.
LINKS_KEY = "ctrlplane/links"


JobIdArg = Annotated[
    str | None, typer.Argument(metavar="JOB_ID", help="The job (default: $JOBAGENTCTL_JOB_ID).")
]
StatusFlag = Annotated[
    str | None,
    typer.Option(
        "--status",
        "-s",
        metavar="S",
        help="successful, failure, skipped, …",
        autocompletion=terminal_choices,
    ),
]
ExitCodeFlag = Annotated[
    int | None,
    typer.Option("--exit-code", metavar="N", help="0 → successful, anything else → failure."),
]
MessageFlag = Annotated[str | None, typer.Option("--message", "-m", metavar="M", help="Message.")]
ClaimIdFlag = Annotated[
    str | None,
    typer.Option(
        "--claim-id", metavar="ID", help="Fencing token (default: $JOBAGENTCTL_CLAIM_ID)."
    ),
]
ExternalIdFlag = Annotated[
    str | None,
    typer.Option("--external-id", metavar="X", help="Id of the run in another system."),
]
LinkFlag = Annotated[
    list[str],
    typer.Option("--link", metavar="LABEL=URL", help="A link to show with the job (repeatable)."),
]


def complete(
    ctx: typer.Context,
    job_id: JobIdArg = None,
    status: StatusFlag = None,
    exit_code: ExitCodeFlag = None,
    message: MessageFlag = None,
    claim_id: ClaimIdFlag = None,
    external_id: ExternalIdFlag = None,
    links: LinkFlag = [],  # noqa: B006 - Typer's default for a repeatable option; never mutated
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
    from jobagentctl.settings import job_context

    state = get_state(ctx)
    final, message = final_status(status, exit_code, message)
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


def final_status(
    status: str | None, exit_code: int | None, message: str | None
) -> tuple[JobStatus, str | None]:
    """The status to report, from exactly one of --status and --exit-code, and the message
    (a failing exit code says itself when no --message is given)."""
    from jobagentctl.cli.status import terminal_status
    from jobagentctl.errors import UsageError
    from jobagentctl.models import JobStatus

    if (status is None) == (exit_code is None):
        raise UsageError("give exactly one of --status and --exit-code")
    if status is not None:
        return terminal_status(status), message
    if exit_code == 0:
        return JobStatus.SUCCESSFUL, message
    return JobStatus.FAILURE, message if message is not None else f"exit code {exit_code}"


def register(app: typer.Typer) -> None:
    """Add the ``complete`` command to ``app``."""
    app.command("complete")(complete)
