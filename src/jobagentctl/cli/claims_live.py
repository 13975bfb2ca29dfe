"""The live view of ``inspect-claims --watch``: what fits an operator's pane, most urgent first.

A frame is plain lines cut to the terminal; ``output.live`` colours and draws them. It holds:

- a summary (how many claims of each kind, how many rows are not shown);
- a line while the server is unreachable;
- the header, and one line per claim.

Columns give way in a fixed order when the width runs out; ids are shortened as git abbreviates
hashes, unambiguous within the frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from uuid import UUID

from jobagentctl.cli.output import SHORT_ID, Line, short_ids
from jobagentctl.errors import LeaseUnsupported, NotFound, ServerError, ServerUnavailable
from jobagentctl.models import (
    DELIVERING_MARK,
    DELIVERY_PENDING,
    QUIET_MARK,
    STALE_MARK,
    ClaimState,
)

if TYPE_CHECKING:
    from jobagentctl.client import Client
    from jobagentctl.models import JobClaim

__all__ = [
    "STUCK_MARKS",
    "Claims",
    "ClaimsWatch",
    "Line",
    "agent_names",
    "fetch_claims",
    "mark_of",
    "quiet_seconds",
    "rank",
    "render",
    "route_missing",
    "short_ids",
]
# The widest agent name shown (a longer one is cut, with "…").
AGENT_NAME_WIDTH = 16

# The marks in the order the summary names them and rows rank: most urgent first. A mark not
# listed (a kind of claim a newer server knows) ranks with the stuck ones, after `expired`.
MARK_ORDER: tuple[str, ...] = (
    ClaimState.EXPIRED.value,
    ClaimState.UNLEASED.value,
    STALE_MARK,
    QUIET_MARK,
    DELIVERING_MARK,
    ClaimState.ACTIVE.value,
)
# The marks --fail-if-stuck counts (the table's and the watch's).
STUCK_MARKS = frozenset(
    {ClaimState.EXPIRED.value, ClaimState.UNLEASED.value, STALE_MARK, QUIET_MARK}
)
# Back-off while the server is unreachable: the pause doubles from --interval up to this.
MAX_BACKOFF = 30.0


def mark_rank(mark: str) -> int:
    """0 for expired, 1 for any other mark (stuck, or a kind a newer server knows: worth a
    look), 2 for active."""
    if mark == ClaimState.EXPIRED:
        return 0
    return 2 if mark == ClaimState.ACTIVE else 1


@dataclass(frozen=True)
class Claims:
    """What one refresh read: the most urgent claims, the count of each mark over all of them, and
    when. ``ranked`` says whether the server could rank them itself (an older one could not, so
    every claim was read)."""

    items: list[JobClaim]
    counts: dict[str, int]
    read_at: datetime
    ranked: bool = True

    @property
    def total(self) -> int:
        """How many claims match, in all."""
        return sum(self.counts.values())

    @property
    def stuck(self) -> int:
        """How many claims are stuck (:data:`STUCK_MARKS`)."""
        return sum(n for mark, n in self.counts.items() if mark in STUCK_MARKS)


def mark_of(
    claim: JobClaim, stale_after: float | None, now: datetime, quiet_after: float | None = None
) -> str:
    """The claim's state, by this machine's clock:

    - ``stale`` for an active claim silent (no heartbeat) for longer than ``stale_after`` seconds;
    - else ``quiet`` when its command printed nothing for longer than ``quiet_after``.

    A gateway's claim whose report waits for ctrlplane is ``delivering``, whatever its
    heartbeats."""
    if claim.delivery == DELIVERY_PENDING:
        return DELIVERING_MARK
    if claim.state != ClaimState.ACTIVE:
        return str(claim.state)
    last = claim.last_heartbeat_at or claim.claimed_at
    if stale_after is not None and last is not None and (now - last).total_seconds() > stale_after:
        return STALE_MARK
    quiet = quiet_seconds(claim, now)
    if quiet_after is not None and quiet is not None and quiet > quiet_after:
        return QUIET_MARK
    return str(claim.state)


def quiet_seconds(claim: JobClaim, now: datetime) -> int | None:
    """How long the claim's command has printed nothing, in whole seconds. It counts from its last
    output, or from the claim when there is none yet. An older server or agent sends no
    ``lastOutputAt``, so the claim time is used then too. None without a claim time."""
    since = claim.last_output_at or claim.claimed_at
    if since is None:
        return None
    return max(0, int((now - since).total_seconds()))


def rank(
    claims: Sequence[JobClaim],
    stale_after: float | None,
    now: datetime,
    quiet_after: float | None = None,
) -> list[JobClaim]:
    """``claims`` most urgent first, as the server ranks them (for a server that cannot)."""
    far = datetime.max.replace(tzinfo=UTC)

    def key(claim: JobClaim) -> tuple[int, datetime, datetime]:
        expires = claim.claim_expires_at or far
        mark = mark_of(claim, stale_after, now, quiet_after)
        return (mark_rank(mark), expires, claim.claimed_at or far)

    return sorted(claims, key=key)


def fetch_claims(
    client: Client,
    *,
    agent: UUID | None,
    state: str,
    stale_after: float | None,
    limit: int,
    ranked: bool,
    quiet_after: float | None = None,
) -> Claims:
    """The ``limit`` most urgent claims and the counts, in one request; ``ranked=False`` (a
    server older than the route) reads every claim and ranks them here."""
    from jobagentctl.client import iter_pages

    now = datetime.now(UTC)
    if ranked:
        answer = client.urgent_claims(
            agent_id=agent,
            state=state,
            stale_after=stale_after,
            quiet_after=quiet_after,
            limit=limit,
        )
        return Claims(answer.items, dict(answer.counts), now)
    every = list(
        iter_pages(
            lambda n, off: client.list_claims(agent_id=agent, state=state, limit=n, offset=off),
            limit=500,
        )
    )
    counts: dict[str, int] = {}
    for claim in every:
        mark = mark_of(claim, stale_after, now, quiet_after)
        counts[mark] = counts.get(mark, 0) + 1
    return Claims(rank(every, stale_after, now, quiet_after)[:limit], counts, now, ranked=False)


def agent_names(client: Client) -> Callable[[UUID], str] | None:
    """The workspace's agents' names (made safe, cut to :data:`AGENT_NAME_WIDTH`), read once;
    None when the key may not list agents (the frame shows short agent ids then)."""
    from jobagentctl.cli.sanitize import safe_tokens, truncate
    from jobagentctl.client import iter_pages
    from jobagentctl.errors import AuthError

    try:
        names = {
            agent.id: truncate(safe_tokens(agent.name), AGENT_NAME_WIDTH)
            for agent in iter_pages(lambda n, off: client.list_agents(n, off), limit=500)
        }
    except (NotFound, AuthError, LeaseUnsupported):
        return None
    return lambda agent: names.get(agent) or agent.hex[:SHORT_ID]


def route_missing(exc: Exception) -> bool:
    """Whether ``exc`` says the server has no ``job-claims/urgent`` route (it is older)."""
    if isinstance(exc, LeaseUnsupported):
        return True
    return isinstance(exc, NotFound) and not exc.details


@dataclass(frozen=True)
class Column:
    """A column of the frame: its header, and its place in the order columns give way in
    (``gives_way`` 0: never dropped; higher: dropped sooner)."""

    header: str
    gives_way: int
    cell: Callable[[JobClaim, str], str]


def _age(value: datetime | None, now: datetime) -> str:
    from jobagentctl.durations import relative

    return relative(value, now)


def _columns(
    now: datetime, jobs: Mapping[UUID, str], agents: Callable[[UUID], str]
) -> list[Column]:
    from jobagentctl.durations import format_duration

    return [
        Column("STATE", 0, lambda c, mark: mark),
        Column("JOB", 0, lambda c, mark: jobs[c.job_id]),
        Column("EXPIRES", 1, lambda c, mark: _age(c.claim_expires_at, now)),
        Column("AGENT", 2, lambda c, mark: agents(c.job_agent_id)),
        Column("HEARTBEAT", 3, lambda c, mark: _age(c.last_heartbeat_at, now)),
        Column("CLAIMED", 4, lambda c, mark: _age(c.claimed_at, now)),
        Column("ATT", 5, lambda c, mark: "-" if c.attempt is None else str(c.attempt)),
        Column(
            "LEASE",
            6,
            lambda c, mark: "-" if c.lease_seconds is None else format_duration(c.lease_seconds),
        ),
        Column("CLAIM", 7, lambda c, mark: "-" if c.claim_id is None else c.claim_id.hex[:8]),
    ]


def _fit(widths: list[int], columns: Sequence[Column], width: int) -> list[int]:
    """The indexes of the columns kept: those that give way first go until the rest fit."""
    kept = list(range(len(columns)))
    droppable = sorted(
        (i for i in kept if columns[i].gives_way), key=lambda i: -columns[i].gives_way
    )
    while sum(widths[i] for i in kept) + 2 * (len(kept) - 1) > width and droppable:
        kept.remove(droppable.pop(0))
    return kept


def summary(claims: Claims, shown: int, now: datetime, width: int) -> str:
    """``3,051 claims: 12 expired, 3 stale, 3,036 active · 3,031 not shown`` and the time."""
    marks = sorted(claims.counts, key=lambda m: MARK_ORDER.index(m) if m in MARK_ORDER else 0.5)
    parts = [f"{claims.counts[m]:,} {m}" for m in marks if claims.counts[m]]
    noun = "claim" if claims.total == 1 else "claims"
    text = f"{claims.total:,} {noun}" + (f": {', '.join(parts)}" if parts else "")
    hidden = claims.total - shown
    if hidden > 0:
        text += f" · {hidden:,} not shown"
    clock = now.astimezone().strftime("%H:%M:%S")
    if len(text) + 2 + len(clock) <= width:
        text = text.ljust(width - len(clock)) + clock
    return text[:width]


@dataclass
class Outage:
    """The server is unreachable: since when, the last error, the next try (monotonic)."""

    since: datetime
    error: str
    next_try: float
    failures: int = 1

    def lines(self, now: datetime, clock: float, width: int) -> list[str]:
        """``server unreachable since 12:03:40 (25s), next try in 8s: cannot reach …``, on
        two lines at most."""
        from jobagentctl.cli.sanitize import safe_text
        from jobagentctl.durations import format_duration

        since = self.since.astimezone().strftime("%H:%M:%S")
        lasted = format_duration(round(max(0.0, (now - self.since).total_seconds())))
        wait = format_duration(round(max(0.0, self.next_try - clock)))
        text = f"server unreachable since {since} ({lasted}), next try in {wait}: "
        text += safe_text(self.error)
        return [text[:width], text[width : 2 * width]] if len(text) > width else [text]


def render(
    claims: Claims | None,
    stale_after: float | None,
    *,
    width: int,
    height: int,
    now: datetime,
    outage: Sequence[str] = (),
    agents: Callable[[UUID], str | None] | None = None,
    quiet_after: float | None = None,
) -> list[Line]:
    """The frame: at most ``height`` lines of at most ``width`` characters; ``outage``: the
    lines that say the server is unreachable."""
    notes = [Line(text) for text in outage]
    if claims is None:
        return [Line("reading claims…"[:width]), *notes][:height]
    room = max(0, height - 2 - len(notes))
    rows = claims.items[:room]
    marks = [mark_of(c, stale_after, now, quiet_after) for c in rows]
    jobs = short_ids([c.job_id for c in rows])
    agent_ids = short_ids([c.job_agent_id for c in rows])
    named = agents or (lambda a: None)
    columns = _columns(now, jobs, lambda a: named(a) or agent_ids[a])
    cells = [[col.cell(c, mark) for col in columns] for c, mark in zip(rows, marks, strict=True)]
    widths = [max([len(col.header)] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    kept = _fit(widths, columns, width)
    head = [Line(summary(claims, len(rows), now, width)), *notes]
    if not rows:
        return [*head, Line("(none)")][:height]

    def joined(values: Sequence[str]) -> str:
        return "  ".join(values[i].ljust(widths[i]) for i in kept).rstrip()[:width]

    lines = [*head, Line(joined([col.header for col in columns]))]
    for row, mark in zip(cells, marks, strict=True):
        lines.append(Line(joined(row), mark, (0, min(len(mark), width))))
    return lines[:height]


@dataclass
class ClaimsWatch:
    """The watch's state between frames: the last claims read, the outage if any, and when to read
    again. It reads every ``interval``; while the server is unreachable, it backs off to
    :data:`MAX_BACKOFF`. Errors other than an unreachable or failing server end the watch."""

    read: Callable[[int], Claims]
    interval: float
    stale_after: float | None
    agents: Callable[[UUID], str | None] | None = None
    quiet_after: float | None = None
    clock: Callable[[], float] = time.monotonic
    last: Claims | None = None
    outage: Outage | None = None
    _next_read: float = field(default=0.0, repr=False)

    def frame(self, width: int, height: int) -> list[Line]:
        """Read the claims if it is time (as many as the frame can show), and draw them."""
        now = datetime.now(UTC)
        tick = self.clock()
        if tick >= self._next_read:
            try:
                self.last = self.read(max(1, height - 2))
            except (ServerUnavailable, ServerError) as exc:
                self._failed(exc, now, tick)
            else:
                self.outage = None
                self._next_read = tick + self.interval
        return render(
            self.last,
            self.stale_after,
            width=width,
            height=height,
            now=now,
            outage=self.outage.lines(now, tick, width) if self.outage else (),
            agents=self.agents,
            quiet_after=self.quiet_after,
        )

    def _failed(self, exc: ServerUnavailable | ServerError, now: datetime, tick: float) -> None:
        failures = self.outage.failures + 1 if self.outage else 1
        pause = min(self.interval * 2**failures, max(self.interval, MAX_BACKOFF))
        since = self.outage.since if self.outage else now
        self.outage = Outage(since, exc.message, tick + pause, failures)
        self._next_read = tick + pause

    @property
    def stuck(self) -> int:
        """Stuck claims in the last read (0 before any)."""
        return self.last.stuck if self.last is not None else 0
