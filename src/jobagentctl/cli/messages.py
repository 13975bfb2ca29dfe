"""Conversation on stderr: confirmations, notices that survive ``-q``, and warnings.

Kept apart from output.py (which draws results) so the invocation state can hand ``warn`` to
the API client without importing the renderer.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobagentctl.cli.context import AppState

__all__ = ["info", "notice", "warn"]


def info(state: AppState, message: str) -> None:
    """A confirmation or progress note on stderr, unless ``-q``."""
    if not state.quiet:
        print(message, file=sys.stderr)


def notice(message: str) -> None:
    """Something the reader must see on stderr, even with ``-q`` (e.g. "shown only once")."""
    print(message, file=sys.stderr)


def warn(message: str) -> None:
    """A warning on stderr, even with ``-q``."""
    print(f"warning: {message}", file=sys.stderr)
