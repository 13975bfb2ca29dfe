"""Conversation on stderr: confirmations, notices that survive ``-q``, and warnings.

Kept apart from output.py (which draws results) so the invocation state can hand ``warn`` to
the API client without importing the renderer.
"""

from __future__ import annotations

import sys
from typing import Protocol

__all__ = ["info", "notice", "warn"]


class _Quiet(Protocol):
    # What ``info`` reads of the invocation state (``context.AppState``), named without
    # importing context: context imports this module.
    @property
    def quiet(self) -> bool: ...


def info(state: _Quiet, message: str) -> None:
    """A confirmation or progress note on stderr, unless ``-q``."""
    if not state.quiet:
        print(message, file=sys.stderr)


def notice(message: str) -> None:
    """Something the reader must see on stderr, even with ``-q`` (e.g. "shown only once")."""
    print(message, file=sys.stderr)


def warn(message: str) -> None:
    """A warning on stderr, even with ``-q``."""
    print(f"warning: {message}", file=sys.stderr)
