"""Where the supervisor's conversation goes: the one :class:`Log` every part of `run` is given.

The CLI decides what each level prints (``--quiet``, ``--debug``); by default info and warnings
go to stderr and debug nowhere.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Log"]


def _stderr(message: str) -> None:
    sys.stderr.write(f"jobagentctl: {message}\n")
    sys.stderr.flush()


def _silent(message: str) -> None:
    del message


@dataclass(frozen=True)
class Log:
    """The three levels of the supervisor's messages, each a callable taking one line."""

    info: Callable[[str], None] = _stderr
    warn: Callable[[str], None] = _stderr
    debug: Callable[[str], None] = _silent
