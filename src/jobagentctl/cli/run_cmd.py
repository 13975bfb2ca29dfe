"""`jobagentctl run -- CMD` (placeholder until the supervisor lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``run`` command to ``app``."""
