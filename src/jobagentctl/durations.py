"""Durations as the command line takes them: ``90``, ``90s``, ``1.5s``, ``5m``, ``1h``, ``inf``.

A bare number is seconds. ``inf`` (or ``infinity``) means "no limit" and parses to ``math.inf``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from jobagentctl.errors import UsageError

__all__ = ["format_duration", "parse_duration", "relative"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str, *, name: str = "duration") -> float:
    """Seconds in ``text``; ``UsageError`` (exit 2) when it is not a duration.

    Compound forms such as ``1h30m`` are accepted, as in Go and systemd.
    """
    value = text.strip().lower()
    if value in ("inf", "infinity"):
        return math.inf
    if not value:
        raise UsageError(f"invalid {name}: empty")
    try:
        seconds = float(value)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(value) or pos == 0:
            raise UsageError(
                f"invalid {name} {text!r}: use seconds (90), or 90s, 5m, 1h, 1h30m, 7d, inf"
            ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"invalid {name} {text!r}: must be a finite number ≥ 0, or inf")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form: ``45s``, ``3m20s``, ``2h05m``, ``inf``."""
    if math.isinf(seconds):
        return "inf"
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def relative(value: datetime | None, now: datetime | None = None) -> str:
    """``3m20s ago`` / ``in 45s`` / ``-`` for a human reading a table."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    delta = (now - value).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"{format_duration(delta)} ago" if delta > 0 else f"in {format_duration(-delta)}"
