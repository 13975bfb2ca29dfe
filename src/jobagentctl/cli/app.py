"""The Typer application: command registration, global options, and the exit-code decision.

:class:`RootGroup` is the one place an error becomes an exit code (SPEC §7), inside the app so
``CliRunner`` tests see the same codes a shell does.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import typer
from typer.core import TyperGroup

from jobagentctl import __version__
from jobagentctl.cli import (
    agents_cmd,
    cancel_cmd,
    claim_cmd,
    complete_cmd,
    completion_cmd,
    heartbeat_cmd,
    inspect_claims_cmd,
    jobs_cmd,
    list_cmd,
    options,
    requeue_cmd,
    run_cmd,
)
from jobagentctl.cli.context import AppState, get_state
from jobagentctl.cli.server import server_app
from jobagentctl.errors import JobAgentError, exit_code_for

__all__ = ["PROG_NAME", "RootGroup", "app", "main", "report_error"]

PROG_NAME = "jobagentctl"
COMPLETE_VAR = "_JOBAGENTCTL_COMPLETE"


def report_error(exc: BaseException, state: AppState | None) -> int:
    """Print ``exc`` on stderr (plus a JSON line under ``-o json``) and return its exit code."""
    code = exit_code_for(exc)
    debug = state.debug if state is not None else False
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, JobAgentError):
        # `status` is what a server answered; local errors (a bad flag, a refused connection,
        # stuck claims, the server commands' own database work) have none to report.
        message, wire_code, status = exc.message, exc.code, exc.response_status
    else:
        message = f"unexpected {type(exc).__name__}: {exc}"
        if not debug:
            message += " (use --debug for the traceback)"
        wire_code, status = "INTERNAL_ERROR", None
    print(f"error: {message}", file=sys.stderr)
    if state is not None and state.output_or_default() == "json":
        line = {"code": wire_code, "message": message, "status": status, "exitCode": code}
        print(json.dumps({"error": line}), file=sys.stderr)
    return code


def _is_framework_exception(exc: BaseException) -> bool:
    # Typer's own exceptions (Exit, Abort, usage errors) carry their own exit codes.
    return type(exc).__module__.startswith("typer.")


class RootGroup(TyperGroup):
    """The root command: maps every error a command raises to its exit code."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if _is_framework_exception(exc):
                raise
            state = ctx.find_object(AppState)
            raise typer.Exit(report_error(exc, state)) from None


app = typer.Typer(
    name=PROG_NAME,
    cls=RootGroup,
    no_args_is_help=True,
    add_completion=False,
    # Plain help and plain tracebacks: Rich is only imported when a table is drawn.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"{PROG_NAME} {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Pull-based job agents: claim jobs under a lease, heartbeat, report.

    Configuration comes from flags, JOBAGENTCTL_* variables, CTRLPLANE_URL/_API_KEY/_WORKSPACE,
    then the profile in ~/.config/jobagentctl/config.toml. Global options may also follow the
    command. Exit codes: 0 ok, 1 error, 2 usage, 3 server unavailable, 4 auth, 5 not found,
    6 conflict, 7 no job, 130 interrupted.
    """
    get_state(ctx)


for _module in (
    list_cmd,
    claim_cmd,
    heartbeat_cmd,
    complete_cmd,
    inspect_claims_cmd,
    requeue_cmd,
    cancel_cmd,
):
    _module.register(app)
run_cmd.register(app)
agents_cmd.register(app)
jobs_cmd.register(app)
app.add_typer(server_app, name="server")
completion_cmd.register(app)
options.install(app)


def main() -> None:
    """The console-script entry point."""
    if os.environ.get(COMPLETE_VAR):
        # Typer's completion scripts expect Typer's completion classes, which add_completion=False
        # leaves unregistered.
        from typer._completion_classes import completion_init

        completion_init()
    app(prog_name=PROG_NAME)
