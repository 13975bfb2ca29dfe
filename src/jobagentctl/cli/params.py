"""Parsing of command arguments that Typer cannot type: ids, JSON or @FILE, KEY=VALUE pairs.

Every failure is a :class:`~jobagentctl.errors.UsageError` (exit 2) naming the option.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jobagentctl.errors import UsageError
from jobagentctl.settings import parse_uuid as uuid_arg

__all__ = ["json_object", "key_values", "uuid_arg"]


def json_object(text: str | None, name: str) -> dict[str, Any] | None:
    """A JSON object given inline, as ``@FILE``, or as ``@-`` (stdin)."""
    if text is None:
        return None
    source = text
    if text.startswith("@"):
        target = text[1:]
        try:
            source = sys.stdin.read() if target == "-" else Path(target).read_text("utf-8")
        except OSError as exc:
            raise UsageError(f"{name}: cannot read {target}: {exc.strerror}") from None
    try:
        value = json.loads(source)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}: invalid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{name}: expected a JSON object, got {type(value).__name__}")
    return value


def key_values(pairs: list[str], name: str) -> dict[str, str]:
    """``["K=V", …]`` as a dict; the key must not be empty."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"{name}: expected KEY=VALUE, got {pair!r}")
        result[key.strip()] = value
    return result
