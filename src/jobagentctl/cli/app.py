"""The Typer application: global options, command registration, and the exit-code decision."""

from __future__ import annotations

import typer

from jobagentctl import __version__
from jobagentctl.cli import run_cmd
from jobagentctl.cli.server_cmd import server_app

app = typer.Typer(name="jobagentctl", no_args_is_help=True, add_completion=False)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"jobagentctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Pull-based job agents: claim jobs under a lease, heartbeat, report."""


app.add_typer(server_app, name="server")
run_cmd.register(app)


def main() -> None:
    app()
