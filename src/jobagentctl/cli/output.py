"""Rendering of command results: Rich tables on a TTY, tsv when piped, JSON, and env lines.

The only module that imports Rich, and only inside the functions that draw, so commands that
print tsv or JSON never pay for it. Data goes to stdout; conversation goes to stderr.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any
from uuid import UUID

from jobagentctl.cli import context
from jobagentctl.cli.messages import info, notice, warn
from jobagentctl.cli.sanitize import (
    CELL_WIDTH,
    message_cell,
    safe_text,
    safe_tokens,
    truncate,
    tsv_text,
)

# relative lives with the durations: claims_watch uses it too.
from jobagentctl.durations import format_duration, relative
from jobagentctl.errors import UsageError
from jobagentctl.models import (
    AgentState,
    ClaimState,
    JobStatus,
    LogChunk,
    LogStream,
    WireModel,
    timestamps_as_sent,
)

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console, RenderableType

    from jobagentctl.cli.context import AppState

__all__ = [
    "VIEWS",
    "Column",
    "Line",
    "LogPrinter",
    "View",
    "count_title",
    "emit",
    "emit_accepted",
    "emit_env",
    "fit_list",
    "info",
    "live",
    "more_hint",
    "notice",
    "relative",
    "render_table",
    "rfc3339",
    "short_ids",
    "spinner",
    "to_jsonable",
    "warn",
]


@dataclass(frozen=True)
class Line:
    """One line of a frame, and the part of it to colour as ``mark`` (a state's style)."""

    text: str
    mark: str | None = None
    mark_at: tuple[int, int] = (0, 0)


# States shown in colour on a TTY (never when NO_COLOR / --no-color).
# Keys are wire values (StrEnum members hash as their strings) and `stale` and `quiet`, the
# marks that --stale-after and --quiet-after put on an active claim silent for too long.
STATE_STYLES: dict[str, str] = {
    ClaimState.ACTIVE: "green",
    ClaimState.EXPIRED: "red",
    ClaimState.UNLEASED: "yellow",
    ClaimState.REVOKED: "magenta",
    AgentState.BUSY: "cyan",
    AgentState.IDLE: "green",
    AgentState.OFFLINE: "red",
    "stale": "yellow",
    "quiet": "yellow",
    JobStatus.SUCCESSFUL: "green",
    JobStatus.FAILURE: "red",
    JobStatus.IN_PROGRESS: "cyan",
    JobStatus.QUEUED: "blue",
    JobStatus.CANCELLED: "magenta",
}


def rfc3339(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; naive datetimes are taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def to_jsonable(value: Any, *, as_sent: bool = False) -> Any:
    """Models, datetimes, UUIDs and enums as JSON values (camelCase keys, RFC 3339 UTC).

    ``as_sent`` (``-o json``): a model parsed from a response is the JSON object the server sent,
    exactly (its timestamps as written, its key order). Tables and tsv use the parsed values, but a
    timestamp the server sent keeps its text. A datetime we computed is RFC 3339 UTC.
    """
    if as_sent and isinstance(value, WireModel) and (sent := value.as_sent()) is not None:
        return sent
    if hasattr(value, "model_dump"):
        # Only the fields the server sent (plus any it sent that we do not model): a field it
        # left out is not printed as null.
        row = to_jsonable(value.model_dump(mode="python", by_alias=True, exclude_unset=True))
        if isinstance(value, WireModel):
            # Timestamps as the server wrote them (".389Z" stays so, not ".389000Z").
            row.update(timestamps_as_sent(value))
        return row
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, as_sent=as_sent) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v, as_sent=as_sent) for v in value]
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return value


@dataclass(frozen=True)
class Column:
    """One column: its wire key (json/tsv order), its table header, and how to show it.
    ``gives_way``: when a list table is wider than the terminal, the columns with the highest go
    first. A column at 0 never goes; the message column is narrowed instead, as the watch does."""

    key: str
    header: str
    kind: str = "text"  # text | time (absolute in tsv, relative on a TTY) | age | until
    gives_way: int = 5


@dataclass(frozen=True)
class View:
    """The columns of one kind of result; tsv prints them in this order, without a header."""

    columns: tuple[Column, ...]


# The lease of a claim, as the results of claim, heartbeat and the claims list show it.
_LEASE = (
    Column("claimId", "CLAIM", gives_way=8),
    Column("attempt", "ATTEMPT", gives_way=6),
    Column("leaseSeconds", "LEASE", gives_way=7),
)
_EXPIRES = Column("claimExpiresAt", "EXPIRES", "until", gives_way=1)

_JOB_COLUMNS = (
    Column("id", "JOB", gives_way=0),
    Column("status", "STATUS", gives_way=0),
    Column("jobAgentId", "AGENT", gives_way=4),
    Column("createdAt", "CREATED", "age", gives_way=3),
    Column("startedAt", "STARTED", "age", gives_way=7),
    Column("completedAt", "COMPLETED", "age", gives_way=6),
    Column("externalId", "EXTERNAL ID", gives_way=8),
    Column("message", "MESSAGE", gives_way=5),
)

VIEWS: dict[str, View] = {
    "job": View(_JOB_COLUMNS),
    "claimed": View((Column("id", "JOB"), *_LEASE, _EXPIRES, Column("status", "STATUS"))),
    # `jobs get`: the job's columns, then whether an agent still holds a claim on it (a
    # queued job is not claimable meanwhile); last, so tsv readers of `jobs list` cut alike.
    "job-detail": View((*_JOB_COLUMNS, Column("claimHeld", "CLAIM HELD"))),
    "heartbeat": View((Column("jobId", "JOB"), *_LEASE, _EXPIRES)),
    "accepted": View((Column("id", "ID"), Column("message", "MESSAGE"))),
    "claim": View(
        (
            Column("jobId", "JOB", gives_way=0),
            Column("state", "STATE", gives_way=0),
            Column("jobAgentId", "AGENT", gives_way=3),
            *_LEASE,
            Column("claimedAt", "CLAIMED", "age", gives_way=5),
            Column("lastHeartbeatAt", "LAST HEARTBEAT", "age", gives_way=4),
            _EXPIRES,
            # inspect-claims adds it: how long the command printed nothing (last: tsv readers
            # cut the columns before it).
            Column("quietSeconds", "QUIET", gives_way=2),
        )
    ),
    "agent": View(
        (
            Column("id", "ID", gives_way=0),
            Column("name", "NAME", gives_way=0),
            Column("type", "TYPE", gives_way=3),
            # presence: last, older scripts cut the first three
            Column("state", "STATE", gives_way=0),
            Column("lastSeenAt", "LAST SEEN", "age", gives_way=1),
            # beside the state: what an offline agent still holds
            Column("heldClaims", "HELD", gives_way=2),
        )
    ),
    # `server …` results: printed once, the API key among them.
    "server-init": View(
        (
            Column("workspaceId", "WORKSPACE"),
            Column("apiKey", "API KEY"),
            Column("database", "DATABASE"),
            Column("slug", "SLUG"),  # last: older scripts cut the first three
        )
    ),
    "workspace-created": View(
        (Column("workspaceId", "WORKSPACE"), Column("apiKey", "API KEY"), Column("slug", "SLUG"))
    ),
    "key-created": View(
        (
            Column("id", "KEY ID"),
            Column("apiKey", "API KEY"),
            Column("workspaceId", "WORKSPACE"),
            Column("jobAgentId", "AGENT"),
        )
    ),
    "migrated": View(
        (
            Column("applied", "APPLIED MIGRATIONS"),
            Column("database", "DATABASE"),
            Column("schemaVersion", "SCHEMA VERSION"),
            Column("releaseSchemaVersion", "THIS RELEASE'S"),
        )
    ),
    "key-revoked": View((Column("id", "KEY ID"), Column("revoked", "REVOKED"))),
    "attempt": View(
        (
            Column("attempt", "ATTEMPT", gives_way=0),
            Column("outcome", "OUTCOME", gives_way=0),
            Column("claimId", "CLAIM", gives_way=5),
            Column("jobAgentId", "AGENT", gives_way=3),
            Column("claimedAt", "CLAIMED", "age", gives_way=2),
            Column("endedAt", "ENDED", "age", gives_way=1),
        )
    ),
}


def _tsv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # as JSON spells it, for `[ "$x" = true ]`
        return "true" if value else "false"
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"))
    return tsv_text(str(value))


def _table_cell(column: Column, value: Any, now: datetime, *, detail: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if column.kind in ("age", "until", "time") and isinstance(value, str):
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return relative(when, now)
    if column.key in ("leaseSeconds", "quietSeconds") and isinstance(value, int):
        return format_duration(value)
    text = str(value)
    if detail:
        return safe_text(text, keep_newlines=True)
    if column.key == "message":
        return message_cell(text)
    return truncate(safe_tokens(text), CELL_WIDTH)


def _rows(
    items: Sequence[Any], overrides: Sequence[Mapping[str, Any]] | None, *, as_sent: bool = False
) -> list[Any]:
    rows = [to_jsonable(item, as_sent=as_sent) for item in items]
    if overrides:
        for row, extra in zip(rows, overrides, strict=True):
            row.update(extra)
    return rows


def emit(
    state: AppState,
    view: str,
    data: BaseModel | Mapping[str, Any] | Sequence[BaseModel],
    *,
    overrides: Sequence[Mapping[str, Any]] | None = None,
    title: str | None = None,
    agents: Callable[[UUID], str | None] | None = None,
) -> None:
    """Print a result (one model or mapping, or a list) on stdout in the state's output format.

    ``overrides`` replace fields per item (e.g. ``state: stale``) in every format; ``agents``
    names the agents of a list table's AGENT column (the table only).
    """
    many = not (hasattr(data, "model_dump") or isinstance(data, Mapping))
    items: Sequence[Any] = data if many else [data]  # type: ignore[assignment]
    rows = _rows(items, overrides, as_sent=state.output == "json")
    if state.output == "json":
        print(json.dumps(rows if many else rows[0], indent=2))
    elif state.output == "tsv":
        columns = VIEWS[view].columns
        for row in rows:
            print("\t".join(_tsv_cell(row.get(c.key)) for c in columns))
    elif state.output == "table":
        if not many:
            render_table(state, _detail_table(state, VIEWS[view], rows[0]))
        elif rows or not state.quiet:
            table = _list_table(state, VIEWS[view], rows, title=title, agents=agents)
            render_table(state, table)
    else:
        raise UsageError(f"-o {state.output} is not available for this command")


def more_hint(state: AppState, shown: int, total: int) -> None:
    """``50 of 10,000 (use --all-pages or --limit)`` on stderr when one page holds less than the
    whole list; not with -q. It is said in every format: a script reading a pipe is told its list
    was cut too."""
    if total > shown:
        info(state, f"{shown:,} of {total:,} (use --all-pages or --limit)")


def count_title(what: str, shown: int, total: int) -> str:
    """A list's title with its count, as :func:`more_hint` writes it: ``jobs (all): 50 of
    10,000``, or ``jobs (all): 6`` when the list is whole."""
    return f"{what}: {shown:,} of {total:,}" if total > shown else f"{what}: {shown:,}"


def emit_accepted(state: AppState, accepted: BaseModel, confirmation: str) -> None:
    """A 202 ``{id, message}``: a confirmation on stderr on a TTY, the object otherwise."""
    if state.output == "table":
        info(state, f"{confirmation} ({safe_text(str(getattr(accepted, 'message', '')))})")
    else:
        emit(state, "accepted", accepted)


def emit_env(state: AppState, variables: Mapping[str, Any]) -> None:
    """``export NAME=value`` lines for ``eval``, shell-quoted; ``None`` becomes empty."""
    for name, value in variables.items():
        text = "" if value is None else str(value)
        print(f"export {name}={shlex.quote(text)}")


# --- Rich, imported only from here on ---------------------------------------------------------


def _console(state: AppState, *, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(
        file=sys.stderr if stderr else sys.stdout,
        markup=False,  # server-supplied text must not be read as markup
        highlight=False,
        emoji=False,
        no_color=not state.color,
        soft_wrap=False,
    )


def _styled(state: AppState, text: str) -> Any:
    from rich.text import Text

    style = STATE_STYLES.get(text) if state.color else None
    return Text(text, style=style or "")


_NEVER_CUT = frozenset({"state", "status"})
# The columns of ids a list shortens (git-style unambiguous prefixes, as the watch does) when
# the table is wider than the terminal; -o tsv and -o json always have them whole.
_ID_KEYS = frozenset({"id", "jobId", "jobAgentId", "claimId"})
# The narrowest a message column gets before the columns it outranks are dropped.
_MESSAGE_MIN = 16
_GAP = 2


# The shortest id shown (git's default abbreviation); longer when two ids of a list share it.
SHORT_ID = 7


def short_ids(ids: Sequence[UUID], minimum: int = SHORT_ID) -> dict[UUID, str]:
    """Each id as the shortest prefix of its hex digits (at least ``minimum``) that no other
    id of ``ids`` shares."""
    distinct = sorted({value.hex for value in ids})
    length = minimum
    while length < 32 and len({h[:length] for h in distinct}) < len(distinct):
        length += 1
    return {value: value.hex[:length] for value in ids}


def fit_list(columns: Sequence[Column], cells: list[list[str]], width: int) -> list[str]:
    """A list's header and rows as lines of at most ``width`` characters, one line per row.

    When the whole table does not fit:

    - ids are shortened first;
    - then columns give way in their ``gives_way`` order;
    - the message column is narrowed (its end kept) rather than dropped, until nothing else
      can go;
    - a line still too wide is cut."""
    kept = list(range(len(columns)))
    w = _widths(columns, cells)
    if _total(kept, w) > width:
        _shorten_ids(columns, cells)
        w = _widths(columns, cells)
    _give_way(columns, kept, w, width)

    def cut(text: str, room: int) -> str:
        return text if len(text) <= room else "…" + text[len(text) - room + 1 :]

    def line(values: Sequence[str]) -> str:
        return "  ".join(cut(values[i], w[i]).ljust(w[i]) for i in kept).rstrip()[:width]

    header = line([c.header for c in columns])
    rule = "─" * min(width, _total(kept, w))
    return [header, rule, *(line(r) for r in cells)]


def _widths(columns: Sequence[Column], cells: list[list[str]]) -> list[int]:
    """Each column's width: its longest cell or its header."""
    return [max([len(c.header)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]


def _total(kept: list[int], w: list[int]) -> int:
    """The width of the ``kept`` columns side by side."""
    return sum(w[i] for i in kept) + _GAP * (len(kept) - 1)


def _shorten_ids(columns: Sequence[Column], cells: list[list[str]]) -> None:
    """Shorten, in place, the id columns' cells to their unambiguous prefixes."""
    for i, column in enumerate(columns):
        if column.key not in _ID_KEYS:
            continue
        ids = {cell: _as_uuid(cell) for cell in {r[i] for r in cells}}
        short = short_ids([u for u in ids.values() if u is not None])
        for r in cells:
            found = ids.get(r[i])
            if found is not None:
                r[i] = short[found]


def _give_way(columns: Sequence[Column], kept: list[int], w: list[int], width: int) -> None:
    """Drop from ``kept`` (and narrow the message in ``w``) until the columns fit ``width``."""
    message = next((i for i, c in enumerate(columns) if c.key == "message"), None)
    order = sorted((i for i in kept if columns[i].gives_way), key=lambda i: -columns[i].gives_way)
    for i in order:
        if _total(kept, w) <= width:
            break
        if i == message:
            floor = max(_MESSAGE_MIN, len(columns[i].header))
            w[i] = max(floor, w[i] - (_total(kept, w) - width))
            continue
        kept.remove(i)
    if _total(kept, w) > width and message in kept:
        kept.remove(message)


def _as_uuid(text: str) -> UUID | None:
    try:
        return UUID(text)
    except ValueError:
        return None


def _list_table(
    state: AppState,
    view: View,
    rows: Sequence[Mapping[str, Any]],
    *,
    title: str | None,
    agents: Callable[[UUID], str | None] | None = None,
) -> RenderableType:
    """A list as one line per row, fitted to the terminal (:func:`fit_list`), its state or
    status coloured; ``agents`` names the agents of an AGENT column (ids otherwise)."""
    from rich.console import Group
    from rich.text import Text

    now = datetime.now(UTC)
    width = max(20, _console(state).width)
    columns = view.columns
    cells: list[list[str]] = []
    for row in rows:
        line: list[str] = []
        for column in columns:
            value = row.get(column.key)
            name = None
            if column.key == "jobAgentId" and agents is not None and isinstance(value, str):
                found = _as_uuid(value)
                name = agents(found) if found is not None else None
            line.append(name if name else _table_cell(column, value, now))
        cells.append(line)
    lines = fit_list(columns, cells, width)
    marked = next((i for i, c in enumerate(columns) if c.key in _NEVER_CUT), None)
    texts = [Text(title)] if title else []
    texts += [Text(lines[0]), Text(lines[1])]
    for cells_of_row, text in zip(cells, lines[2:], strict=True):
        styled = Text(text)
        if marked is not None and state.color:
            # A state or status is never dropped: found in the line by its value (the ids
            # before it are hex, which no state word is).
            value = cells_of_row[marked]
            style = STATE_STYLES.get(value)
            at = text.find(value) if style else -1
            if style and at >= 0:
                styled.stylize(style, at, at + len(value))
        texts.append(styled)
    if not rows:
        texts.append(Text("(none)"))
    return Group(*texts)


def _detail_table(state: AppState, view: View, row: Mapping[str, Any]) -> RenderableType:
    from rich import box
    from rich.table import Table

    now = datetime.now(UTC)
    table = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    table.add_column("field", style="bold" if state.color else "")
    table.add_column("value")
    shown = {c.key for c in view.columns}
    for column in view.columns:
        value = row.get(column.key)
        text = _table_cell(column, value, now, detail=True)
        if column.kind != "text" and value is not None:
            text = f"{safe_text(str(value))} ({text})"
        table.add_row(column.header.lower(), text)
    # The rest of the object (config, metadata, …) as compact JSON, so nothing is hidden.
    for key, value in row.items():
        if key not in shown and value not in (None, {}, [], ""):
            # json.dumps escapes control characters itself.
            text = json.dumps(value) if isinstance(value, dict | list) else str(value)
            table.add_row(safe_text(key), safe_text(text, keep_newlines=True))
    return table


def render_table(state: AppState, renderable: RenderableType) -> None:
    """Draw a Rich table on stdout, coloured only when the state allows it."""
    _console(state).print(renderable)


@contextlib.contextmanager
def spinner(state: AppState, text: str, *, enabled: bool = True) -> Iterator[None]:
    """A spinner on stderr while waiting, only on a TTY and without ``-q``."""
    if not enabled or state.quiet or not context.stderr_is_tty():
        yield
        return
    with _console(state, stderr=True).status(text):
        yield


def live(
    state: AppState,
    frame: Callable[[int, int], tuple[Sequence[Line], bool]],
    *,
    interval: float,
    sleep: Callable[[float], None],
) -> None:
    """Redraw ``frame(width, height)`` every ``interval`` until its second value says stop. The
    frame's lines fit the terminal as it is sized at each redraw. A line's mark is coloured as its
    state."""
    from rich.live import Live
    from rich.text import Text

    console = _console(state)

    def draw() -> tuple[Text, bool]:
        try:
            # The terminal as it is now (resized panes included), not COLUMNS/LINES, which a
            # shell may have exported once.
            real = os.get_terminal_size(sys.stdout.fileno())
            console.size = (real.columns, real.lines)
        except (OSError, ValueError):
            pass
        width, height = console.size
        lines, stop = frame(width, height)
        text = Text(no_wrap=True, overflow="crop", end="")
        for index, line in enumerate(lines):
            if index:
                text.append("\n")
            start = len(text)
            text.append(line.text)
            style = STATE_STYLES.get(line.mark) if line.mark and state.color else None
            if style:
                text.stylize(style, start + line.mark_at[0], start + line.mark_at[1])
        return text, stop

    renderable, stop = draw()
    with Live(renderable, console=console, auto_refresh=False, transient=False) as shown:
        while not stop:
            sleep(interval)
            renderable, stop = draw()
            shown.update(renderable, refresh=True)


class LogPrinter:
    """Prints log chunks on stdout as they come. By default the bytes as they were printed, markers
    on a line of their own. On a terminal, decoded as UTF-8 with control characters made visible, as
    tables do; a character split across chunks is kept whole. With ``-o json`` one object per line:
    ``seq``, ``offset``, ``stream``, ``at`` and ``data`` — the text when the bytes are valid UTF-8,
    else their base64 with ``"encoding": "base64"``."""

    def __init__(self, state: AppState) -> None:
        self._json = state.output == "json"
        self._terminal = context.stdout_is_tty()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._line_start = True

    def write(self, chunks: Sequence[LogChunk]) -> None:
        """Print ``chunks`` and flush (a follow shows each page at once)."""
        out = sys.stdout.buffer
        for chunk in chunks:
            raw = chunk.raw()
            if self._json:
                out.write(json.dumps(_log_chunk_json(chunk, raw)).encode() + b"\n")
            elif chunk.stream == LogStream.MARKER:
                text = raw.decode("utf-8", errors="replace")
                line = safe_text(text) if self._terminal else text
                out.write(("" if self._line_start else "\n").encode() + line.encode() + b"\n")
                self._line_start = True
            else:
                if self._terminal:
                    text = self._decoder.decode(raw)
                    out.write(safe_text(text, keep_newlines=True).encode())
                else:
                    out.write(raw)
                self._line_start = raw.endswith(b"\n")
        out.flush()

    def marker(self, text: str, attempt: int) -> None:
        """A line of our own between two attempts' logs (with ``-o json``, an object with
        ``stream`` ``marker`` and the ``attempt`` that follows, without ``seq``)."""
        out = sys.stdout.buffer
        if self._json:
            item = {"stream": LogStream.MARKER.value, "attempt": attempt, "data": text}
            out.write(json.dumps(item).encode() + b"\n")
        else:
            out.write(("" if self._line_start else "\n").encode() + text.encode() + b"\n")
            self._line_start = True
        out.flush()


def _log_chunk_json(chunk: LogChunk, raw: bytes) -> dict[str, Any]:
    sent = chunk.as_sent() or {}
    item: dict[str, Any] = {
        "seq": chunk.seq,
        "offset": chunk.offset,
        "stream": chunk.stream.value,
        "at": sent.get("at") or rfc3339(chunk.at),
    }
    try:
        item["data"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        item["data"], item["encoding"] = chunk.data, "base64"
    return item
