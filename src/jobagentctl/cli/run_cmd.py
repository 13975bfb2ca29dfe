"""`jobagentctl run -- CMD`: claim a job, run CMD under a heartbeated lease, report its result.

Parses flags into :class:`~jobagentctl.supervisor.RunOptions` and hands over to the supervisor;
the exit code is the supervisor's (SPEC §6.9), never remapped by the app's error handler.
"""

from __future__ import annotations

import math
import signal
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.errors import JobAgentError, UsageError

if TYPE_CHECKING:
    from jobagentctl.cli.context import AppState
    from jobagentctl.supervisor import Log, RunOptions

__all__ = ["REPORT_TIMEOUT_ENV", "parse_signal", "register"]

# Hidden knob: how long the final report is retried (SPEC: 5 minutes). Tests shorten it.
REPORT_TIMEOUT_ENV = "JOBAGENTCTL_RUN_REPORT_TIMEOUT"


def parse_signal(text: str) -> signal.Signals:
    """``TERM``, ``SIGTERM``, ``term`` or ``15`` → ``signal.SIGTERM``."""
    value = text.strip().upper()
    try:
        if value.isdigit():
            return signal.Signals(int(value))
        return signal.Signals[value if value.startswith("SIG") else f"SIG{value}"]
    except (KeyError, ValueError):
        raise UsageError(f"--stop-signal: unknown signal {text!r} (e.g. TERM, INT, 9)") from None


def run(
    ctx: typer.Context,
    command: list[str] = typer.Argument(
        None, metavar="CMD", help="The command and its arguments, after --."
    ),
    job: str | None = typer.Option(
        None, "--job", metavar="ID", help="Claim this job instead of the next queued one."
    ),
    wait: str | None = typer.Option(
        None,
        "--wait",
        metavar="DURATION",
        help="Wait this long for a job (default 0; inf with --loop).",
    ),
    lease_seconds: int | None = typer.Option(
        None,
        "--lease-seconds",
        min=0,
        metavar="N",
        help="Lease to ask for (default 60 or JOBAGENTCTL_LEASE_SECONDS; 0 = unleased).",
    ),
    timeout: str = typer.Option(
        "inf",
        "--timeout",
        metavar="DURATION",
        help="Stop the command after this long and report failure (exit 124).",
    ),
    grace: str = typer.Option(
        "10s",
        "--grace",
        metavar="DURATION",
        help="After the stop signal, wait this long before SIGKILL.",
    ),
    stop_signal: str = typer.Option(
        "TERM", "--stop-signal", metavar="SIG", help="Signal that asks the command to stop."
    ),
    loop: bool = typer.Option(False, "--loop", help="Keep claiming and running jobs."),
    max_jobs: int | None = typer.Option(
        None, "--max-jobs", min=1, metavar="N", help="With --loop: exit 0 after N jobs."
    ),
    idle_timeout: str | None = typer.Option(
        None,
        "--idle-timeout",
        metavar="DURATION",
        help="With --loop: exit 0 after this long without a job.",
    ),
    report: Path | None = typer.Option(
        None,
        "--report",
        metavar="PATH",
        help="Write a JSON record per job, with its verdict (one line; appended with --loop).",
    ),
    output_tail_bytes: int = typer.Option(
        8192,
        "--output-tail-bytes",
        min=0,
        metavar="N",
        help="How much of the end of the output a failure report carries.",
    ),
    no_capture: bool = typer.Option(
        False, "--no-capture", help="Give the command our stdout/stderr as they are (no tail)."
    ),
    on_lease_lost: str = typer.Option(
        "stop",
        "--on-lease-lost",
        metavar="stop|continue",
        help="stop the command (default), or let it finish; never reported either way.",
    ),
    pass_api_key: bool = typer.Option(
        False, "--pass-api-key", help="Pass the API key to the command (JOBAGENTCTL_API_KEY)."
    ),
    report_timeout: str = typer.Option(
        "5m", "--report-timeout", envvar=REPORT_TIMEOUT_ENV, hidden=True
    ),
) -> None:
    """Claim a job, run CMD with the job in its environment, heartbeat, report the result.

    CMD runs in its own process group with JOBAGENTCTL_JOB_ID, JOBAGENTCTL_CLAIM_ID,
    JOBAGENTCTL_ATTEMPT, JOBAGENTCTL_LEASE_SECONDS, JOBAGENTCTL_JOB_FILE (the job as JSON) and
    JOBAGENTCTL_STOP_REASON_FILE set. Exit 0 reports successful, anything else failure.

    Exit codes: CMD's own; 7 no job; 75 lease lost; 124 --timeout; 125 jobagentctl failed;
    126 not executable; 127 not found; 128+N signal N; 143 cancelled. CMD may exit with
    any of these itself: the "verdict" of --report says who chose the code. See docs/run.md.

    \b
    Examples:
      jobagentctl run -- ./deploy.sh
      jobagentctl run --loop --max-jobs 10 --report runs.jsonl -- make -C /srv/app job
    """
    from jobagentctl.supervisor import Supervisor

    state = get_state(ctx)
    try:
        # Flags first: a bad flag is a usage error (exit 2) whatever the settings say.
        partial_options = _options(
            command=command or [],
            job=job,
            wait=wait,
            timeout=timeout,
            grace=grace,
            stop_signal=stop_signal,
            loop=loop,
            max_jobs=max_jobs,
            idle_timeout=idle_timeout,
            report=report,
            output_tail_bytes=output_tail_bytes,
            no_capture=no_capture,
            on_lease_lost=on_lease_lost,
            pass_api_key=pass_api_key,
            report_timeout=report_timeout,
        )
    except UsageError as exc:
        raise typer.BadParameter(exc.message) from None
    try:
        options = partial_options(**_connection(state, lease_seconds))
    except JobAgentError as exc:
        from jobagentctl.cli.app import report_error
        from jobagentctl.supervisor.outcome import Outcome, Verdict, exit_code

        # Nothing was claimed yet: jobagentctl failed (125, as timeout(1) does for its own
        # failures), not the usage or configuration code other commands give.
        code = report_error(exc, state, code=exit_code(Outcome(Verdict.FAILED)))
        _record_setup_failure(report, loop=loop)
        raise typer.Exit(code) from None
    code = Supervisor(options, state.client, log=_log(state)).run()
    raise typer.Exit(code)


def _options(
    *,
    command: list[str],
    job: str | None,
    wait: str | None,
    timeout: str,
    grace: str,
    stop_signal: str,
    loop: bool,
    max_jobs: int | None,
    idle_timeout: str | None,
    report: Path | None,
    output_tail_bytes: int,
    no_capture: bool,
    on_lease_lost: str,
    pass_api_key: bool,
    report_timeout: str,
) -> partial[RunOptions]:
    """Flags → options, but for the connection (settings are read after). UsageError on a
    bad flag."""
    from jobagentctl.cli.params import uuid_arg
    from jobagentctl.durations import parse_duration
    from jobagentctl.supervisor import RunOptions

    if not command:
        raise UsageError("missing CMD: jobagentctl run [OPTIONS] -- CMD [ARGS]...")
    if on_lease_lost not in ("stop", "continue"):
        raise UsageError(f"--on-lease-lost: expected stop or continue, got {on_lease_lost!r}")
    if job is not None and loop:
        raise UsageError("--job claims one job: it cannot be combined with --loop")
    if job is not None and wait is not None:
        raise UsageError("--wait applies only when claiming the next job (no --job)")
    if not loop and (max_jobs is not None or idle_timeout is not None):
        raise UsageError("--max-jobs and --idle-timeout need --loop")
    default_wait = "inf" if loop else "0"
    return partial(
        RunOptions,
        command=list(command),
        job_id=uuid_arg(job, "--job") if job is not None else None,
        wait=parse_duration(wait or default_wait, name="--wait"),
        timeout=parse_duration(timeout, name="--timeout"),
        grace=parse_duration(grace, name="--grace"),
        stop_signal=parse_signal(stop_signal),
        loop=loop,
        max_jobs=max_jobs,
        idle_timeout=(
            parse_duration(idle_timeout, name="--idle-timeout") if idle_timeout else math.inf
        ),
        report_path=report,
        output_tail_bytes=output_tail_bytes,
        capture=not no_capture,
        on_lease_lost=cast(Literal["stop", "continue"], on_lease_lost),
        pass_api_key=pass_api_key,
        report_timeout=parse_duration(report_timeout, name="--report-timeout"),
    )


def _connection(state: AppState, lease_seconds: int | None) -> dict[str, Any]:
    """Where to connect and as whom, from the settings; ConfigError when something is missing.

    A missing API key is left to the first request (AuthError, also exit 125 here).
    """
    state.client().close()  # builds a client only to check the URL, as every command does
    settings = state.settings
    assert settings.url is not None
    return {
        "url": settings.url,
        "workspace_id": state.require_workspace(),
        "agent_id": state.require_agent(),
        "api_key": settings.api_key.get_secret_value() if settings.api_key else None,
        "lease_seconds": lease_seconds if lease_seconds is not None else settings.lease_seconds,
    }


def _record_setup_failure(report: Path | None, *, loop: bool) -> None:
    """Without --loop, --report always gets one record: here, the ``failed`` verdict."""
    from jobagentctl.supervisor.outcome import Verdict
    from jobagentctl.supervisor.record import JobRecord, utc_now, write_record

    if report is None or loop:
        return
    now = utc_now()
    record = JobRecord(None, None, None, now, verdict=Verdict.FAILED, finished_at=now)
    try:
        write_record(report, record, append=False)
    except OSError as exc:
        print(f"error: cannot write --report {report}: {exc}", file=sys.stderr)


def _log(state: AppState) -> Log:
    from jobagentctl.supervisor import Log

    def info(message: str) -> None:
        if not state.quiet:
            print(f"jobagentctl: {message}", file=sys.stderr, flush=True)

    def warn(message: str) -> None:
        print(f"jobagentctl: {message}", file=sys.stderr, flush=True)

    def debug(message: str) -> None:
        if state.debug:
            print(f"jobagentctl: [debug] {message}", file=sys.stderr, flush=True)

    return Log(info=info, warn=warn, debug=debug)


def register(app: typer.Typer) -> None:
    """Add the ``run`` command to ``app``."""
    app.command(
        "run",
        # Everything after CMD belongs to CMD, even without `--`.
        context_settings={"allow_interspersed_args": False},
    )(run)
