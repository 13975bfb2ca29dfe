"""The Typer application: command registration, global options, and the exit-code decision.

:class:`RootGroup` is the one place an error becomes an exit code (its class's, from errors.py). It
is inside the app, so ``CliRunner`` tests see the same codes a shell does.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from jobagentctl import __version__
from jobagentctl.cli import options
from jobagentctl.cli.context import AppState, get_state
from jobagentctl.errors import JobAgentError, exit_code_for

__all__ = ["PROG_NAME", "RootGroup", "app", "main", "report_error"]

PROG_NAME = "jobagentctl"

# Every command, in --help order, and the module whose `register(app)` adds it. A command's
# module is imported, and its Click command built, only when that command runs (or --help and
# completion tables list them all): `heartbeat` never pays for `server` or `run`.
COMMANDS: dict[str, str] = {
    "list": "jobagentctl.cli.list_cmd",
    "claim": "jobagentctl.cli.claim_cmd",
    "heartbeat": "jobagentctl.cli.heartbeat_cmd",
    "complete": "jobagentctl.cli.complete_cmd",
    "inspect-claims": "jobagentctl.cli.inspect_claims_cmd",
    "requeue": "jobagentctl.cli.requeue_cmd",
    "cancel": "jobagentctl.cli.cancel_cmd",
    "run": "jobagentctl.cli.run_cmd",
    "redact": "jobagentctl.cli.redact_cmd",
    "completion": "jobagentctl.cli.completion_cmd",
    "agents": "jobagentctl.cli.agents_cmd",
    "jobs": "jobagentctl.cli.jobs_cmd",
    "server": "jobagentctl.cli.server",
}

_TYPER_SETTINGS: dict[str, Any] = {
    "add_completion": False,
    # Plain help and plain tracebacks: Rich is only imported when a table is drawn.
    "rich_markup_mode": None,
    "pretty_exceptions_enable": False,
}


def report_error(exc: BaseException, state: AppState | None, *, code: int | None = None) -> int:
    """Print ``exc`` on stderr (plus a JSON line under ``-o json``) and return its exit code:
    ``code`` when given (`run` has codes of its own: 125 before the command started), else
    the error class's."""
    if code is None:
        code = exit_code_for(exc)
    debug = state.debug if state is not None else False
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, JobAgentError):
        # `status` is what a server answered; local errors (a bad flag, a refused connection,
        # stuck claims, the server commands' own database work) have none to report.
        message, wire_code, status = exc.message, exc.code, exc.response_status
        details = exc.details
    else:
        message = f"unexpected {type(exc).__name__}: {exc}"
        if not debug:
            message += " (use --debug for the traceback)"
        wire_code, status, details = "INTERNAL_ERROR", None, None
    from jobagentctl.cli.sanitize import safe_text

    # The message may quote the server or a job: no control character reaches the terminal.
    print(f"error: {safe_text(message)}", file=sys.stderr)
    if state is not None and state.output_or_default() == "json":
        # `details` as the server sent them (e.g. heartbeat's `jobStatus`: a cancelled job is
        # stopped for good, a reaped one runs elsewhere), null when there are none.
        line = {
            "code": wire_code,
            "message": message,
            "status": status,
            "exitCode": code,
            "details": details,
        }
        print(json.dumps({"error": line}), file=sys.stderr)
    return code


def _is_framework_exception(exc: BaseException) -> bool:
    # Typer's own exceptions (Exit, Abort, usage errors) carry their own exit codes.
    return type(exc).__module__.startswith("typer.")


def build_command(name: str) -> Any:
    """The Click command ``name``, built from its module alone, with the global options."""
    import importlib

    import typer.main

    module = importlib.import_module(COMMANDS[name])
    holder = typer.Typer(**_TYPER_SETTINGS)
    module.register(holder)
    options.install(holder, root=False)
    built = typer.main.get_command(holder)
    # One command alone is returned as itself; a command group comes inside a group.
    commands = getattr(built, "commands", None)
    command = commands[name] if isinstance(commands, dict) and name in commands else built
    command.name = name
    return command


class RootGroup(TyperGroup):
    """The root command: loads commands on demand, maps every error to its exit code."""

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command name, in --help order, without importing a command's module."""
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, built (its module imported) on first use."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = build_command(cmd_name)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: Any) -> Any:
        """Run the command; an error becomes its message on stderr and its exit code."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly, as Unix tools do.
            raise typer.Exit(_reader_left()) from None
        except Exception as exc:
            if _is_framework_exception(exc):
                raise
            state = ctx.find_object(AppState)
            raise typer.Exit(report_error(exc, state)) from None


app = typer.Typer(
    name=PROG_NAME,
    cls=RootGroup,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    **_TYPER_SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        print(f"{PROG_NAME} {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Pull-based job agents: claim jobs under a lease, heartbeat, report.

    Configuration comes from flags, JOBAGENTCTL_* variables, CTRLPLANE_URL/_API_KEY/_WORKSPACE,
    then the profile in ~/.config/jobagentctl/config.toml. Global options may also follow the
    command. Exit codes: 0 ok, 1 error, 2 usage, 3 server unavailable, 4 auth, 5 not found,
    6 conflict, 7 no job, 8 attempt did not succeed (jobs logs --follow), 130 interrupted.
    """
    get_state(ctx)


options.install(app)


def _reader_left() -> int:
    """Exit status when stdout's reader has gone (``| head``): 0, quietly.

    What was asked was done, and the reader took what it wanted; under ``set -o pipefail`` a
    script must not fail because ``head`` stopped reading. Later writes (and the flush at exit)
    go to /dev/null instead of raising again.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 0


def main() -> None:
    """The console-script entry point (Tab completion is answered before: cli/entry.py)."""
    try:
        app(prog_name=PROG_NAME)
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    try:
        # Output still buffered is written now, where a closed pipe can be told apart.
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_left()
    sys.exit(code)
