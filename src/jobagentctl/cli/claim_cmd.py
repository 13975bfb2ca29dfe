"""`jobagentctl claim`: claim a job by id, or the agent's next one, under a lease."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.errors import UsageError

if TYPE_CHECKING:
    from jobagentctl.models import ClaimedJob

__all__ = ["claimed_env", "register"]


JobIdArg = Annotated[
    str | None,
    typer.Argument(metavar="JOB_ID", help="The job to claim; omit to claim the oldest queued one."),
]
WaitFlag = Annotated[
    str,
    typer.Option(
        "--wait",
        "-w",
        metavar="DURATION",
        help="Without JOB_ID: wait this long for a job (90, 30s, 5m, inf).",
    ),
]
LeaseFlag = Annotated[
    int | None,
    typer.Option(
        "--lease-seconds",
        min=0,
        metavar="N",
        help="Lease to ask for (default 60 or JOBAGENTCTL_LEASE_SECONDS; 0 = unleased V1 claim).",
    ),
]
LimitFlag = Annotated[
    int | None,
    typer.Option(
        "--limit",
        min=1,
        max=100,
        metavar="N",
        help="Without JOB_ID: claim up to N of the oldest queued jobs in one request, each "
        "with its own claim; prints them as a list (not with -o env).",
    ),
]


def claim(
    ctx: typer.Context,
    job_id: JobIdArg = None,
    wait: WaitFlag = "0",
    lease_seconds: LeaseFlag = None,
    limit: LimitFlag = None,
) -> None:
    """Claim a job and print it; exit 7 when nothing is queued.

    With -o env, prints export lines for eval: JOBAGENTCTL_JOB_ID, JOBAGENTCTL_CLAIM_ID,
    JOBAGENTCTL_LEASE_SECONDS and JOBAGENTCTL_ATTEMPT, which heartbeat and complete read.

    With --limit N, claims up to N jobs at once (a busy agent saves a request per job) and prints
    them as a list. Each has its own claim id, heartbeated and completed on its own.

    \b
    Example:
      claim=$(jobagentctl claim --wait 5m -o env) || exit   # 7: nothing queued
      eval "$claim"
      jobagentctl heartbeat
      jobagentctl claim --limit 8 -o json | jq -r '.[] | [.id, .claimId] | @tsv'
    """
    from jobagentctl.cli import output
    from jobagentctl.cli.params import uuid_arg
    from jobagentctl.durations import parse_duration

    state = get_state(ctx)
    waiting = parse_duration(wait, name="--wait")
    job = uuid_arg(job_id, "JOB_ID") if job_id is not None else None
    if job is not None and waiting:
        raise UsageError("--wait applies only when claiming the next job (no JOB_ID)")
    if limit is not None and job is not None:
        raise UsageError("--limit applies only when claiming the next jobs (no JOB_ID)")
    if limit is not None and state.output == "env":
        raise UsageError("-o env prints one job: use -o json or tsv with --limit")
    agent = state.require_agent()
    lease = lease_seconds if lease_seconds is not None else state.settings.lease_seconds
    with state.client() as client:
        if job is not None:
            claimed = client.claim_job(agent, job, lease_seconds=lease)
        else:
            # A spinner only for a real wait: an instant claim would just flicker.
            with output.spinner(state, "waiting for a job…", enabled=waiting > 0):
                batch = client.wait_for_jobs(
                    agent, lease_seconds=lease, wait_seconds=waiting, limit=limit
                )
            if limit is not None:
                output.emit(state, "claimed", batch, title="claimed")
                return
            claimed = batch[0]
    # A claim without lease on a V1-only server: the client has said so on stderr, once.
    if state.output == "env":
        output.emit_env(state, claimed_env(claimed))
    else:
        output.emit(state, "claimed", claimed)


def claimed_env(claimed: ClaimedJob) -> dict[str, Any]:
    """The claim as the environment heartbeat, complete and `run`'s child read (-o env)."""
    from jobagentctl.settings import ATTEMPT_ENV, CLAIM_ID_ENV, JOB_ID_ENV, LEASE_SECONDS_ENV

    return {
        JOB_ID_ENV: claimed.id,
        CLAIM_ID_ENV: claimed.claim_id,
        LEASE_SECONDS_ENV: claimed.lease_seconds,
        ATTEMPT_ENV: claimed.attempt,
    }


def register(app: typer.Typer) -> None:
    """Add the ``claim`` command to ``app``."""
    app.command("claim")(claim)
