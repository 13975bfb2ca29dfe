"""Text made safe to print: no control character reaches a terminal or breaks a tsv record.

Job output and server messages may hold escape sequences, bidi controls and line separators. Every
table cell, tsv field and error line goes through one of these functions.
"""

from __future__ import annotations

__all__ = ["CELL_WIDTH", "message_cell", "safe_text", "safe_tokens", "truncate", "tsv_text"]

# Bidirectional embeddings, overrides and isolates (LRE…RLO, LRI…PDI): printed raw they
# reorder what follows on the line, so text can read otherwise than it is ("Trojan Source").
# The line and paragraph separators end a line for some programs and not for others.
_INVISIBLE_FORMAT = frozenset(
    [*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)), "\u2028", "\u2029"]
)


def _is_control(char: str) -> bool:
    """C0 controls (ESC, CR, …), DEL, C1 controls (CSI, OSC, NEL as single code points), the
    bidi controls and the Unicode line/paragraph separators."""
    code = ord(char)
    return code < 0x20 or 0x7F <= code < 0xA0 or char in _INVISIBLE_FORMAT


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


# tsv: one record per line, one field per tab, and nothing a terminal would act on.
_TSV_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def tsv_text(text: str) -> str:
    """``text`` as one tsv field: ``\\ \t \n \r`` escaped as such, other controls as ``\\xNN``
    (bidi controls and U+2028/U+2029 as ``\\uNNNN``)."""
    return "".join(_TSV_ESCAPES.get(c) or (_escape(c) if _is_control(c) else c) for c in text)


def safe_tokens(text: str, *, keep_newlines: bool = False) -> list[str]:
    """``text`` for a terminal, one token per character: controls become a visible ``\\xNN``.

    Job output and server messages may hold escape sequences (clear screen, window title,
    colours); printed raw they would drive the operator's terminal. A tab becomes a space.
    """
    tokens = []
    for char in text:
        if char == "\n" and keep_newlines:
            tokens.append(char)
        elif char == "\t":
            tokens.append(" ")
        elif _is_control(char):
            tokens.append(_escape(char))
        else:
            tokens.append(char)
    return tokens


def safe_text(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character made visible (see :func:`safe_tokens`)."""
    return "".join(safe_tokens(text, keep_newlines=keep_newlines))


def truncate(tokens: list[str], width: int, *, keep_end: bool = False) -> str:
    """At most ``width`` characters, cut between tokens (never inside an escape), with "…"."""
    if sum(len(t) for t in tokens) <= width:
        return "".join(tokens)
    kept: list[str] = []
    used = 1  # the "…"
    for token in reversed(tokens) if keep_end else tokens:
        if used + len(token) > width:
            break
        kept.append(token)
        used += len(token)
    if keep_end:
        return "…" + "".join(reversed(kept))
    return "".join(kept) + "…"


CELL_WIDTH = 80


def message_cell(text: str) -> str:
    """A message in a list: its last lines (a failure's output tail ends with what matters).

    Lines end at ``\n`` (or ``\r\n``) only, not at every character ``str.splitlines`` takes
    for a line break. A lone CR, VT, FF, NEL, … is a control like any other, shown ``\\xNN``.
    """
    lines = [line.removesuffix("\r").strip(" \t") for line in text.split("\n")]
    lines = [line for line in lines if line]
    tokens: list[str] = []
    for line in reversed(lines):
        tokens = safe_tokens(line) + ([" ⏎ "] if tokens else []) + tokens
        if sum(len(t) for t in tokens) >= CELL_WIDTH:
            break
    return truncate(tokens, CELL_WIDTH, keep_end=True)
