"""The Typer application: global options, command registration, and the exit-code decision.

:class:`RootGroup` is the one place an error becomes an exit code (SPEC §7), inside the app so
``CliRunner`` tests see the same codes a shell does.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    requeue_cmd,
    run_cmd,
)
from jobagentctl.cli.context import AppState, Flags, resolve_output
from jobagentctl.cli.server_cmd import server_app
from jobagentctl.errors import JobAgentError, StuckClaims, UsageError, exit_code_for

if TYPE_CHECKING:
    # Typer's vendored Click context: the type TyperGroup's hooks are declared with.
    from typer._click.core import Context as ClickContext

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
        message, wire_code = exc.message, exc.code
        # Local decisions (bad flags, stuck claims) have no HTTP status to report.
        status = None if isinstance(exc, UsageError | StuckClaims) else exc.status
    else:
        message = f"unexpected {type(exc).__name__}: {exc}"
        if not debug:
            message += " (use --debug for the traceback)"
        wire_code, status = "INTERNAL_ERROR", None
    print(f"error: {message}", file=sys.stderr)
    if state is not None and state.output == "json":
        line = {"code": wire_code, "message": message, "status": status, "exitCode": code}
        print(json.dumps({"error": line}), file=sys.stderr)
    return code


def _is_framework_exception(exc: BaseException) -> bool:
    # Typer's own exceptions (Exit, Abort, usage errors) carry their own exit codes.
    return type(exc).__module__.startswith("typer.")


class RootGroup(TyperGroup):
    """The root command: hoists global options given after a command, and maps errors."""

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if _is_framework_exception(exc):
                raise
            state = ctx.find_object(AppState)
            raise typer.Exit(report_error(exc, state)) from None

    def parse_args(self, ctx: ClickContext, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            args = self._hoist_global_options(ctx, args)
        return super().parse_args(ctx, args)

    def _hoist_global_options(self, ctx: ClickContext, args: list[str]) -> list[str]:
        """Move global options written after the command name in front of it.

        ``jobagentctl list --json`` then means ``jobagentctl --json list``, as the SPEC's
        "global options (every command)" asks. An option the command itself defines (e.g.
        ``server create-key --workspace``) stays with the command, nothing after ``--`` moves,
        and for commands that take a free-form command line nothing after it does either.
        """
        globals_ = _option_arity(self.params)
        start = _command_start(args, globals_)
        if start is None:
            return args
        leaf: Any = self
        end = start
        while end < len(args) and isinstance(leaf, TyperGroup):
            sub = leaf.get_command(ctx, args[end])
            if sub is None:
                return args
            leaf, end = sub, end + 1
        own = _option_arity(leaf.params)
        stop_at_positional = not getattr(leaf, "allow_interspersed_args", True) or any(
            getattr(p, "nargs", 1) == -1 for p in leaf.params if p.param_type_name == "argument"
        )
        hoisted: list[str] = []
        rest: list[str] = []
        tokens = args[end:]
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token == "--":
                rest.extend(tokens[i:])
                break
            name, has_value = _split_option(token)
            if name in own:
                take = 1 if (has_value or not own[name]) else 2
                rest.extend(tokens[i : i + take])
                i += take
                continue
            if name in globals_:
                take = 1 if (has_value or not globals_[name]) else 2
                hoisted.extend(tokens[i : i + take])
                i += take
                continue
            if not token.startswith("-") and stop_at_positional:
                rest.extend(tokens[i:])
                break
            rest.append(token)
            i += 1
        if not hoisted:
            return args
        return [*args[:start], *hoisted, *args[start:end], *rest]


def _option_arity(params: Sequence[Any]) -> dict[str, bool]:
    """Option name → whether it takes a value."""
    arity: dict[str, bool] = {}
    for param in params:
        if param.param_type_name != "option":
            continue
        for opt in (*param.opts, *param.secondary_opts):
            arity[opt] = not param.is_flag and not getattr(param, "count", False)
    return arity


def _split_option(token: str) -> tuple[str, bool]:
    """``--url=X`` → (``--url``, True); ``-ojson`` → (``-o``, True); ``-q`` → (``-q``, False)."""
    if token.startswith("--"):
        name, eq, _ = token.partition("=")
        return name, bool(eq)
    if token.startswith("-") and len(token) > 2:
        return token[:2], True
    return token, False


def _command_start(args: list[str], globals_: dict[str, bool]) -> int | None:
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return None
        if not token.startswith("-"):
            return i
        name, has_value = _split_option(token)
        i += 2 if (globals_.get(name) and not has_value) else 1
    return None


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
    url: str | None = typer.Option(
        None, "--url", metavar="URL", help="Server base URL, with or without /api."
    ),
    workspace: str | None = typer.Option(None, "--workspace", metavar="ID", help="Workspace id."),
    agent: str | None = typer.Option(None, "--agent", metavar="ID", help="Job agent id."),
    profile: str | None = typer.Option(
        None, "--profile", metavar="NAME", help="Profile of the config file to use."
    ),
    api_key_file: Path | None = typer.Option(
        None,
        "--api-key-file",
        metavar="PATH",
        help="Read the API key from this file (keys never come from flags).",
    ),
    output: str | None = typer.Option(
        None,
        "-o",
        "--output",
        metavar="FORMAT",
        help="table, json, tsv or env (default: table on a TTY, tsv when piped).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Same as -o json."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress or confirmations."),
    no_color: bool = typer.Option(False, "--no-color", help="No colours (also: NO_COLOR=1)."),
    debug: bool = typer.Option(
        False, "--debug", help="Tracebacks and an HTTP trace on stderr (API key redacted)."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Pull-based job agents: claim jobs under a lease, heartbeat, report.

    Configuration comes from flags, JOBAGENTCTL_* variables, CTRLPLANE_URL/_API_KEY/_WORKSPACE,
    then the profile in ~/.config/jobagentctl/config.toml. Exit codes: 0 ok, 1 error, 2 usage,
    3 server unavailable, 4 auth, 5 not found, 6 conflict, 7 no job, 130 interrupted.
    """
    state = AppState(
        output="tsv",
        quiet=quiet,
        debug=debug,
        no_color=no_color,
        flags=Flags(
            url=url,
            workspace=workspace,
            agent=agent,
            profile=profile,
            api_key_file=api_key_file,
        ),
    )
    ctx.obj = state
    state.output = resolve_output(output, json_output)


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


def main() -> None:
    """The console-script entry point."""
    if os.environ.get(COMPLETE_VAR):
        # Typer's completion scripts expect Typer's completion classes, which add_completion=False
        # leaves unregistered.
        from typer._completion_classes import completion_init

        completion_init()
    app(prog_name=PROG_NAME)
