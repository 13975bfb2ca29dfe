"""`jobagentctl inspect-claims`: operators list claims with their age, heartbeat and expiry.

Also the stuck-claim check for monitoring (`--fail-if-stuck`, exit 6) and a live view.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import typer

from jobagentctl.cli import context
from jobagentctl.cli.context import get_state
from jobagentctl.errors import StuckClaims, UsageError
from jobagentctl.models import ClaimState

if TYPE_CHECKING:
    from jobagentctl.models import JobClaim

__all__ = ["STALE", "STATES", "display_states", "register"]

# The --state filter values (the row states, then `all`), in the order the help lists them.
STATES: tuple[str, ...] = tuple(state.value for state in ClaimState)
# Not a claim state: the display mark of an active claim silent for longer than --stale-after.
STALE = "stale"
STUCK = frozenset({ClaimState.EXPIRED.value, ClaimState.UNLEASED.value, STALE})
# The pause between --watch redraws (tests replace it).
sleep = time.sleep


def display_states(
    claims: Sequence[JobClaim], stale_after: float | None, now: datetime
) -> list[str]:
    """Each claim's state, with active claims silent for longer than ``stale_after`` as stale.

    Ages are measured against this machine's clock; the server's own expiry uses the database
    clock, so a skewed client clock only moves the ``stale`` mark, never the lease.
    """
    states = []
    for claim in claims:
        state: str = claim.state
        last = claim.last_heartbeat_at or claim.claimed_at
        if (
            stale_after is not None
            and state == ClaimState.ACTIVE
            and last is not None
            and now - last > timedelta(seconds=stale_after)
        ):
            state = STALE
        states.append(state)
    return states


def inspect_claims(
    ctx: typer.Context,
    state_filter: str = typer.Option(
        ClaimState.ALL.value,
        "--state",
        metavar="STATE",
        help=f"{', '.join(STATES[:-1])} or {STATES[-1]}.",
    ),
    stale_after: str | None = typer.Option(
        None,
        "--stale-after",
        metavar="DURATION",
        help="Mark active claims with no heartbeat for this long as stale (e.g. 2m).",
    ),
    watch: bool = typer.Option(False, "--watch", help="Redraw live on a terminal (Ctrl-C ends)."),
    interval: str = typer.Option(
        "2s", "--interval", metavar="DURATION", help="Redraw interval for --watch."
    ),
    fail_if_stuck: bool = typer.Option(
        False,
        "--fail-if-stuck",
        help="Exit 6 if any claim is expired, unleased or stale (with --watch: as soon as one is).",
    ),
) -> None:
    """Show claims: job, agent, state, attempt, age, last heartbeat and expiry.

    Uses --agent (or JOBAGENTCTL_AGENT) as a filter when set.

    \b
    Examples:
      jobagentctl inspect-claims --stale-after 2m
      jobagentctl inspect-claims --fail-if-stuck -q >/dev/null || alert "stuck jobs"
    """
    from jobagentctl.cli import output
    from jobagentctl.client import iter_pages
    from jobagentctl.durations import parse_duration

    state = get_state(ctx)
    if state_filter not in STATES:
        raise UsageError(f"--state {state_filter}: use one of {', '.join(STATES)}")
    stale = parse_duration(stale_after, name="--stale-after") if stale_after else None
    every = parse_duration(interval, name="--interval")
    if watch and (state.output != "table" or not context.stdout_is_tty()):
        raise UsageError("--watch draws a live table: it needs a terminal and -o table")
    if watch and not 0 < every < float("inf"):
        raise UsageError("--interval must be a finite duration above 0")
    agent = state.settings.agent
    title = f"claims ({state_filter})" + (f" of agent {agent}" if agent else "")

    with state.client() as client:

        def snapshot() -> tuple[list[JobClaim], list[dict[str, Any]], int]:
            claims = list(
                iter_pages(
                    lambda n, off: client.list_claims(
                        agent_id=agent, state=state_filter, limit=n, offset=off
                    ),
                    limit=500,
                )
            )
            marks = display_states(claims, stale, datetime.now(UTC))
            stuck = sum(mark in STUCK for mark in marks)
            return claims, [{"state": mark} for mark in marks], stuck

        if watch:
            seen_stuck = 0

            def frame() -> tuple[Any, bool]:
                nonlocal seen_stuck
                claims, overrides, seen_stuck = snapshot()
                table = output.claims_table(state, claims, overrides, title)
                return table, fail_if_stuck and seen_stuck > 0

            output.watch(state, frame, interval=every, sleep=sleep)
            stuck = seen_stuck
        else:
            claims, overrides, stuck = snapshot()
            output.emit(state, "claim", claims, overrides=overrides, title=title)
    if fail_if_stuck and stuck:
        raise StuckClaims(f"{stuck} stuck claim(s): expired, unleased or stale")


def register(app: typer.Typer) -> None:
    app.command("inspect-claims")(inspect_claims)
