"""`jobagentctl run -- CMD`: claim a job, run CMD under a heartbeated lease, report its result.

Parses flags into :class:`~jobagentctl.supervisor.RunOptions` and hands over to the supervisor. The
exit code is the supervisor's (the table of docs/run.md), never remapped by the app's error handler.
A shell script tells "no job" from "the command failed" by it.
"""

from __future__ import annotations

import math
import signal
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

import typer

from jobagentctl.cli.context import get_state
from jobagentctl.errors import JobAgentError, UsageError

if TYPE_CHECKING:
    from jobagentctl.cli.context import AppState
    from jobagentctl.supervisor import Log, RunOptions

__all__ = ["REPORT_TIMEOUT_ENV", "RunFlags", "parse_signal", "register"]

# Hidden knob: how long the final report is retried (5 minutes: long enough to ride out a server
# restart, short enough that a run ends). Tests shorten it.
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


# The flags, declared once (the signature of `run` only names them).
Command = Annotated[
    list[str] | None, typer.Argument(metavar="CMD", help="The command and its arguments, after --.")
]
JobFlag = Annotated[
    str | None,
    typer.Option("--job", metavar="ID", help="Claim this job instead of the next queued one."),
]
WaitFlag = Annotated[
    str | None,
    typer.Option(
        "--wait", metavar="DURATION", help="Wait this long for a job (default 0; inf with --loop)."
    ),
]
LeaseFlag = Annotated[
    int | None,
    typer.Option(
        "--lease-seconds",
        min=0,
        metavar="N",
        help="Lease to ask for (default 60 or JOBAGENTCTL_LEASE_SECONDS; 0 = unleased).",
    ),
]
TimeoutFlag = Annotated[
    str,
    typer.Option(
        "--timeout",
        metavar="DURATION",
        help="Stop the command after this long and report failure (exit 124).",
    ),
]
GraceFlag = Annotated[
    str,
    typer.Option(
        "--grace", metavar="DURATION", help="After the stop signal, wait this long before SIGKILL."
    ),
]
StopSignalFlag = Annotated[
    str,
    typer.Option("--stop-signal", metavar="SIG", help="Signal that asks the command to stop."),
]
LoopFlag = Annotated[bool, typer.Option("--loop", help="Keep claiming and running jobs.")]
MaxJobsFlag = Annotated[
    int | None,
    typer.Option("--max-jobs", min=1, metavar="N", help="With --loop: exit 0 after N jobs."),
]
IdleTimeoutFlag = Annotated[
    str | None,
    typer.Option(
        "--idle-timeout",
        metavar="DURATION",
        help="With --loop: exit 0 after this long without a job.",
    ),
]
ReportFlag = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="PATH",
        help="Write a JSON record per job, with its verdict (one line; appended with --loop).",
    ),
]
TailBytesFlag = Annotated[
    int,
    typer.Option(
        "--output-tail-bytes",
        min=0,
        metavar="N",
        help="How much of the end of the output a failure report carries.",
    ),
]
NoCaptureFlag = Annotated[
    bool,
    typer.Option("--no-capture", help="Give the command our stdout/stderr as they are (no tail)."),
]
OnLeaseLostFlag = Annotated[
    str,
    typer.Option(
        "--on-lease-lost",
        metavar="stop|continue",
        help="stop the command (default), or let it finish; never reported either way.",
    ),
]
PassApiKeyFlag = Annotated[
    bool,
    typer.Option("--pass-api-key", help="Pass the API key to the command (JOBAGENTCTL_API_KEY)."),
]
NoOutputTimeoutFlag = Annotated[
    str | None,
    typer.Option(
        "--no-output-timeout",
        metavar="DURATION",
        help="Stop the command when it prints nothing for this long; report failure (exit 124).",
    ),
]
NoShipOutputFlag = Annotated[
    bool,
    typer.Option(
        "--no-ship-output",
        help="Do not send the output to the server's job log (the failure tail still goes).",
    ),
]
RedactFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--redact",
        metavar="PATTERN",
        help="Also redact the values of variables named like PATTERN (fnmatch; repeatable).",
    ),
]
ReportTimeoutFlag = Annotated[
    str, typer.Option("--report-timeout", envvar=REPORT_TIMEOUT_ENV, hidden=True)
]


def run(  # noqa: PLR0913 - a Typer command: its parameters are its flags
    ctx: typer.Context,
    command: Command = None,
    job: JobFlag = None,
    wait: WaitFlag = None,
    lease_seconds: LeaseFlag = None,
    timeout: TimeoutFlag = "inf",
    grace: GraceFlag = "10s",
    stop_signal: StopSignalFlag = "TERM",
    loop: LoopFlag = False,
    max_jobs: MaxJobsFlag = None,
    idle_timeout: IdleTimeoutFlag = None,
    report: ReportFlag = None,
    output_tail_bytes: TailBytesFlag = 8192,
    no_capture: NoCaptureFlag = False,
    on_lease_lost: OnLeaseLostFlag = "stop",
    pass_api_key: PassApiKeyFlag = False,
    report_timeout: ReportTimeoutFlag = "5m",
    no_output_timeout: NoOutputTimeoutFlag = None,
    no_ship_output: NoShipOutputFlag = False,
    redact: RedactFlag = None,
) -> None:
    """Claim a job, run CMD with the job in its environment, heartbeat, report the result.

    CMD runs in its own process group with JOBAGENTCTL_JOB_ID, JOBAGENTCTL_CLAIM_ID,
    JOBAGENTCTL_ATTEMPT, JOBAGENTCTL_LEASE_SECONDS, JOBAGENTCTL_JOB_FILE (the job as JSON) and
    JOBAGENTCTL_STOP_REASON_FILE set. Exit 0 reports successful, anything else failure.

    Exit codes: CMD's own; 7 no job; 75 lease lost; 124 --timeout or --no-output-timeout; 125
    jobagentctl failed; 126 not executable; 127 not found; 128+N signal N; 143 cancelled. CMD may
    exit with any of these itself: --report's "verdict" says who chose. See docs/run.md.

    \b
    Examples:
      jobagentctl run -- ./deploy.sh
      jobagentctl run --loop --max-jobs 10 --report runs.jsonl -- make -C /srv/app job
    """
    from jobagentctl.supervisor import Supervisor

    state = get_state(ctx)
    flags = RunFlags(
        command=command or [],
        job=job,
        wait=wait,
        lease_seconds=lease_seconds,
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
        no_output_timeout=no_output_timeout,
        no_ship_output=no_ship_output,
        redact=tuple(redact or ()),
    )
    raise typer.Exit(Supervisor(_options(state, flags), state.client, log=_log(state)).run())


@dataclass(frozen=True)
class RunFlags:
    """The flags of one `run` as given, before parsing (durations and ids still text)."""

    command: list[str]
    job: str | None
    wait: str | None
    lease_seconds: int | None
    timeout: str
    grace: str
    stop_signal: str
    loop: bool
    max_jobs: int | None
    idle_timeout: str | None
    report: Path | None
    output_tail_bytes: int
    no_capture: bool
    on_lease_lost: str
    pass_api_key: bool
    report_timeout: str
    no_output_timeout: str | None = None
    no_ship_output: bool = False
    redact: tuple[str, ...] = ()

    def check(self) -> None:
        """A :class:`UsageError` for flags that contradict each other (or no CMD)."""
        if not self.command:
            raise UsageError("missing CMD: jobagentctl run [OPTIONS] -- CMD [ARGS]...")
        if self.on_lease_lost not in ("stop", "continue"):
            raise UsageError(
                f"--on-lease-lost: expected stop or continue, got {self.on_lease_lost!r}"
            )
        if self.job is not None and self.loop:
            raise UsageError("--job claims one job: it cannot be combined with --loop")
        if self.job is not None and self.wait is not None:
            raise UsageError("--wait applies only when claiming the next job (no --job)")
        if not self.loop and (self.max_jobs is not None or self.idle_timeout is not None):
            raise UsageError("--max-jobs and --idle-timeout need --loop")
        if self.no_capture and self.no_output_timeout is not None:
            raise UsageError("--no-output-timeout watches the output: it needs capture")
        if any(not pattern.strip() for pattern in self.redact):
            raise UsageError("--redact: expected a variable name pattern, e.g. '*_CREDENTIALS'")

    def parse(self) -> partial[RunOptions]:
        """Flags → options, but for the connection (settings are read after). UsageError on a
        bad flag."""
        from jobagentctl.cli.params import uuid_arg
        from jobagentctl.durations import parse_duration
        from jobagentctl.supervisor import RunOptions
        from jobagentctl.supervisor.output.redact import DEFAULT_PATTERNS

        self.check()
        idle, silent = self.idle_timeout, self.no_output_timeout
        return partial(
            RunOptions,
            command=list(self.command),
            job_id=uuid_arg(self.job, "--job") if self.job is not None else None,
            wait=parse_duration(self.wait or ("inf" if self.loop else "0"), name="--wait"),
            timeout=parse_duration(self.timeout, name="--timeout"),
            grace=parse_duration(self.grace, name="--grace"),
            stop_signal=parse_signal(self.stop_signal),
            loop=self.loop,
            max_jobs=self.max_jobs,
            idle_timeout=parse_duration(idle, name="--idle-timeout") if idle else math.inf,
            report_path=self.report,
            output_tail_bytes=self.output_tail_bytes,
            capture=not self.no_capture,
            on_lease_lost=cast(Literal["stop", "continue"], self.on_lease_lost),
            pass_api_key=self.pass_api_key,
            report_timeout=parse_duration(self.report_timeout, name="--report-timeout"),
            no_output_timeout=(
                parse_duration(silent, name="--no-output-timeout") if silent else math.inf
            ),
            ship_output=not self.no_ship_output,
            redact_patterns=(*DEFAULT_PATTERNS, *self.redact),
        )


def _options(state: AppState, flags: RunFlags) -> RunOptions:
    """The options of the run. A bad flag is a usage error (exit 2) whatever the settings say.
    Settings that cannot connect are jobagentctl's own failure (exit 125, reported)."""
    try:
        partial_options = flags.parse()
    except UsageError as exc:
        raise typer.BadParameter(exc.message) from None
    try:
        return partial_options(**_connection(state, flags.lease_seconds))
    except JobAgentError as exc:
        from jobagentctl.cli.app import report_error
        from jobagentctl.supervisor.outcome import Outcome, Verdict, exit_code

        # Nothing was claimed yet: jobagentctl failed (125, as timeout(1) does for its own
        # failures), not the usage or configuration code other commands give.
        code = report_error(exc, state, code=exit_code(Outcome(Verdict.FAILED)))
        _record_setup_failure(flags.report, loop=flags.loop)
        raise typer.Exit(code) from None


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
    from jobagentctl.supervisor.report_file import JobRecord, utc_now, write_record

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
