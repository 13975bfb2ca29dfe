"""`jobagentctl inspect-claims`: operators list claims with their age, heartbeat, expiry and
how long each has been quiet (no output). Also the stuck-claim check for monitoring
(`--fail-if-stuck`, exit 6) and a live view.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobagentctl.cli import context
from jobagentctl.cli.context import get_state
from jobagentctl.errors import StuckClaims, UsageError
from jobagentctl.models import ClaimState

if TYPE_CHECKING:
    from uuid import UUID

    from jobagentctl.cli.context import AppState
    from jobagentctl.client import Client
    from jobagentctl.models import JobClaim

__all__ = ["QUIET", "STALE", "STATES", "display_states", "quiet_seconds", "register"]

# The --state filter values (the row states, then `all`), in the order the help lists them.
STATES: tuple[str, ...] = tuple(state.value for state in ClaimState)
# Not a claim state: the display mark of an active claim silent for longer than --stale-after.
STALE = "stale"
# Nor this: the mark of an active claim whose command printed nothing for --quiet-after.
QUIET = "quiet"
STUCK = frozenset({ClaimState.EXPIRED.value, ClaimState.UNLEASED.value, STALE, QUIET})
# The pause between --watch redraws (tests replace it).
sleep = time.sleep


def display_states(
    claims: Sequence[JobClaim],
    stale_after: float | None,
    now: datetime,
    quiet_after: float | None = None,
) -> list[str]:
    """Each claim's state, with active claims silent for longer than ``stale_after`` as stale
    (no heartbeat), else as quiet when their command printed nothing for ``quiet_after``.

    Ages are measured against this machine's clock; the server's own expiry uses the database
    clock, so a skewed client clock only moves the ``stale`` and ``quiet`` marks, never the
    lease.
    """
    states = []
    for claim in claims:
        state: str = claim.state
        last = claim.last_heartbeat_at or claim.claimed_at
        quiet = quiet_seconds(claim, now)
        if state == ClaimState.ACTIVE:
            if (
                stale_after is not None
                and last is not None
                and now - last > timedelta(seconds=stale_after)
            ):
                state = STALE
            elif quiet_after is not None and quiet is not None and quiet > quiet_after:
                state = QUIET
        states.append(state)
    return states


def quiet_seconds(claim: JobClaim, now: datetime) -> int | None:
    """How long the claim's command has printed nothing, in whole seconds: since its last
    output, or since the claim when it printed nothing yet (or the server does not know:
    an older server or agent sends no ``lastOutputAt``). None without a claim time."""
    since = claim.last_output_at or claim.claimed_at
    if since is None:
        return None
    return max(0, int((now - since).total_seconds()))


StateFlag = Annotated[
    str,
    typer.Option("--state", metavar="STATE", help=f"{', '.join(STATES[:-1])} or {STATES[-1]}."),
]
StaleAfterFlag = Annotated[
    str | None,
    typer.Option(
        "--stale-after",
        metavar="DURATION",
        help="Mark active claims with no heartbeat for this long as stale (e.g. 2m).",
    ),
]
WatchFlag = Annotated[
    bool, typer.Option("--watch", help="Redraw live on a terminal (Ctrl-C ends).")
]
IntervalFlag = Annotated[
    str, typer.Option("--interval", metavar="DURATION", help="Redraw interval for --watch.")
]
QuietAfterFlag = Annotated[
    str | None,
    typer.Option(
        "--quiet-after",
        metavar="DURATION",
        help="Mark active claims whose command printed nothing for this long as quiet (stuck).",
    ),
]
FailIfStuckFlag = Annotated[
    bool,
    typer.Option(
        "--fail-if-stuck",
        help="Exit 6 if any claim is expired, unleased, stale or quiet (with --watch: as soon "
        "as one is).",
    ),
]
# One look at the claims: the claims, their display states (as overrides), how many are stuck.
Snapshot = tuple[list["JobClaim"], list[dict[str, Any]], int]


def inspect_claims(
    ctx: typer.Context,
    state_filter: StateFlag = ClaimState.ALL.value,
    stale_after: StaleAfterFlag = None,
    watch: WatchFlag = False,
    interval: IntervalFlag = "2s",
    fail_if_stuck: FailIfStuckFlag = False,
    quiet_after: QuietAfterFlag = None,
) -> None:
    """Show claims: job, agent, state, attempt, age, last heartbeat, expiry and quiet time.

    Uses --agent (or JOBAGENTCTL_AGENT) as a filter when set.

    \b
    Examples:
      jobagentctl inspect-claims --stale-after 2m
      jobagentctl inspect-claims --quiet-after 15m --fail-if-stuck -q >/dev/null
      jobagentctl inspect-claims --fail-if-stuck -q >/dev/null || alert "stuck jobs"
    """
    from jobagentctl.cli import output
    from jobagentctl.durations import parse_duration

    state = get_state(ctx)
    if state_filter not in STATES:
        raise UsageError(f"--state {state_filter}: use one of {', '.join(STATES)}")
    stale = parse_duration(stale_after, name="--stale-after") if stale_after else None
    quiet = parse_duration(quiet_after, name="--quiet-after") if quiet_after else None
    every = parse_duration(interval, name="--interval")
    if watch and (state.output != "table" or not context.stdout_is_tty()):
        raise UsageError("--watch draws a live table: it needs a terminal and -o table")
    if watch and not 0 < every < float("inf"):
        raise UsageError("--interval must be a finite duration above 0")
    agent = state.settings.agent
    title = f"claims ({state_filter})" + (f" of agent {agent}" if agent else "")
    with state.client() as client:
        snapshot = partial(_snapshot, client, agent, state_filter, stale, quiet)
        if watch:
            stuck = _watch(state, snapshot, title, every, stop_when_stuck=fail_if_stuck)
        else:
            claims, overrides, stuck = snapshot()
            output.emit(state, "claim", claims, overrides=overrides, title=title)
    if fail_if_stuck and stuck:
        raise StuckClaims(f"{stuck} stuck claim(s): expired, unleased, stale or quiet")


def _snapshot(
    client: Client,
    agent: UUID | None,
    state_filter: str,
    stale: float | None,
    quiet: float | None = None,
) -> Snapshot:
    """Every claim (all pages) with its display state and quiet time, and how many are
    stuck."""
    from jobagentctl.client import iter_pages

    claims = list(
        iter_pages(
            lambda n, off: client.list_claims(
                agent_id=agent, state=state_filter, limit=n, offset=off
            ),
            limit=500,
        )
    )
    now = datetime.now(UTC)
    marks = display_states(claims, stale, now, quiet)
    stuck = sum(mark in STUCK for mark in marks)
    overrides = [
        {"state": mark, "quietSeconds": quiet_seconds(claim, now)}
        for mark, claim in zip(marks, claims, strict=True)
    ]
    return claims, overrides, stuck


def _watch(
    state: AppState,
    snapshot: Callable[[], Snapshot],
    title: str,
    interval: float,
    *,
    stop_when_stuck: bool,
) -> int:
    """Redraw the claims every ``interval`` (until Ctrl-C, or a stuck claim when asked to
    stop then); the number of stuck claims last seen."""
    from jobagentctl.cli import output

    seen_stuck = 0

    def frame() -> tuple[Any, bool]:
        nonlocal seen_stuck
        claims, overrides, seen_stuck = snapshot()
        table = output.claims_table(state, claims, overrides, title)
        return table, stop_when_stuck and seen_stuck > 0

    output.watch(state, frame, interval=interval, sleep=sleep)
    return seen_stuck


def register(app: typer.Typer) -> None:
    """Add the ``inspect-claims`` command to ``app``."""
    app.command("inspect-claims")(inspect_claims)
