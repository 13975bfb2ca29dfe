"""`jobagentctl server …` (placeholder until the server commands land)."""

from __future__ import annotations

import typer

server_app = typer.Typer(help="Run and administer the jobagentctl server.", no_args_is_help=True)
