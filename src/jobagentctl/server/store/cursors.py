"""Keyset cursors of the job listings. A page's ``nextCursor`` is the position of its last row
(``created_at`` and the dialect's tie-breaker), in an opaque URL-safe token.

A listing that follows cursors holds still while the queue moves. The next page starts after the
last row seen. It does not start after a count of rows, which writers may have changed meanwhile.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from jobagentctl.errors import ValidationError

__all__ = ["decode_cursor", "encode_cursor"]

_BAD_CURSOR = "cursor is not one this server gave (pass a page's nextCursor unchanged)"


def encode_cursor(created_at: Any, key: Any) -> str:
    """The token of a row's position: its ``created_at`` and tie-breaker as the driver gave
    them (SQLite: epoch seconds and rowid; PostgreSQL: a timestamptz and the job id)."""
    if isinstance(created_at, datetime):
        created_at = created_at.isoformat()
    raw = json.dumps([created_at, key if isinstance(key, int) else str(key)])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, dialect: str) -> tuple[Any, Any]:
    """``(after_at, after_key)`` of a token :func:`encode_cursor` wrote for ``dialect``'s rows,
    in the types its statements compare; :class:`ValidationError` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, key = json.loads(raw)
        if dialect == "sqlite":
            if isinstance(at, bool) or not isinstance(at, int | float) or type(key) is not int:
                raise ValueError(cursor)
            return float(at), key
        after = datetime.fromisoformat(at)
        if after.tzinfo is None:  # this server writes the offset: the token was made up
            raise ValueError(cursor)
        return after, UUID(key)
    except (ValueError, TypeError, AttributeError, binascii.Error) as exc:
        raise ValidationError(_BAD_CURSOR, details={"cursor": cursor}) from exc
