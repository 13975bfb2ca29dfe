"""`jobagentctl inspect-claims`: operators list claims with their age, heartbeat, expiry and
how long each has been quiet (no output). Also the stuck-claim check for monitoring
(`--fail-if-stuck`, exit 6) and a live view.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobagentctl.cli import context
from jobagentctl.cli.claims_live import STUCK_MARKS, mark_of, quiet_seconds
from jobagentctl.cli.context import get_state
from jobagentctl.errors import JobAgentError, StuckClaims, UsageError, ValidationError
from jobagentctl.models import QUIET_MARK, STALE_MARK, ClaimState

if TYPE_CHECKING:
    from uuid import UUID

    from jobagentctl.cli.context import AppState
    from jobagentctl.client import Client
    from jobagentctl.models import JobClaim

__all__ = ["QUIET", "STALE", "STATES", "display_states", "register"]

# The --state filter values (the row states, then `all`), in the order the help lists them.
STATES: tuple[str, ...] = tuple(state.value for state in ClaimState)
# Not a claim state: the display mark of an active claim silent for longer than --stale-after.
STALE = STALE_MARK
# Nor this: the mark of an active claim whose command printed nothing for --quiet-after.
QUIET = QUIET_MARK
STUCK = STUCK_MARKS
# The pause between --watch redraws (tests replace it).
sleep = time.sleep


def display_states(
    claims: Sequence[JobClaim],
    stale_after: float | None,
    now: datetime,
    quiet_after: float | None = None,
) -> list[str]:
    """Each claim's state, with the watch's marks (:func:`~jobagentctl.cli.claims_live.mark_of`). An
    active claim silent for longer than ``stale_after`` is stale (no heartbeat). Else it is quiet
    when its command printed nothing for ``quiet_after``.

    Ages are measured against this machine's clock. The server's own expiry uses the database clock,
    so a skewed client clock only moves the ``stale`` and ``quiet`` marks, never the lease.
    """
    return [mark_of(claim, stale_after, now, quiet_after) for claim in claims]


StateFlag = Annotated[
    str,
    typer.Option(
        "--state",
        metavar="STATE",
        help=f"{', '.join(STATES[:-1])} or {STATES[-1]}.",
        autocompletion=lambda incomplete: [s for s in STATES if s.startswith(incomplete)],
    ),
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
    from jobagentctl.cli.list_cmd import agent_names_for_table
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
    agent = state.agent_filter()
    title = f"claims ({state_filter})" + (f" of agent {agent}" if agent else "")
    with state.client() as client, _state_known(state_filter):
        snapshot = partial(_snapshot, client, agent, state_filter, stale, quiet)
        if watch:
            stuck = _watch(state, client, agent, state_filter, (stale, quiet), every, fail_if_stuck)
        else:
            claims, overrides, stuck = snapshot()
            names = agent_names_for_table(state, client)
            title = output.count_title(title, len(claims), len(claims))
            output.emit(state, "claim", claims, overrides=overrides, title=title, agents=names)
    if fail_if_stuck and stuck:
        what = "stuck claim" if stuck == 1 else "stuck claims"
        raise StuckClaims(f"{stuck:,} {what}: expired, unleased, stale or quiet")


@contextlib.contextmanager
def _state_known(state_filter: str) -> Iterator[None]:
    """A server older than a claim state (``revoked`` came with 0.4) refuses it as a malformed
    query. This says so plainly, not in the framework's validation message."""
    try:
        yield
    except ValidationError as exc:
        fields = (exc.details or {}).get("errors") or []
        named = [f.get("field", "") for f in fields if isinstance(f, dict)]
        if not any(str(field).endswith("state") for field in named):
            raise
        raise UsageError(
            f"--state {state_filter}: the server does not support this state (it is older "
            "than this jobagentctl); use --state all, or one of: "
            + ", ".join(
                s
                for s in STATES
                if s not in (state_filter, ClaimState.REVOKED.value, ClaimState.ALL.value)
            )
        ) from None


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
    client: Client,
    agent: UUID | None,
    state_filter: str,
    thresholds: tuple[float | None, float | None],
    interval: float,
    stop_when_stuck: bool,
) -> int:
    """Redraw the most urgent claims every ``interval``, through server outages, until Ctrl-C (or a
    stuck claim when asked to stop then). Returns the number of stuck claims last seen."""
    from jobagentctl.cli import claims_live as claims_watch
    from jobagentctl.cli import output

    stale, quiet = thresholds
    ranked = True
    names: list[Callable[[UUID], str] | None] = []  # the agents' names, once read

    def read(limit: int) -> claims_watch.Claims:
        nonlocal ranked
        options: dict[str, Any] = {
            "agent": agent,
            "state": state_filter,
            "stale_after": stale,
            "quiet_after": quiet,
        }
        try:
            claims = claims_watch.fetch_claims(client, **options, limit=limit, ranked=ranked)
        except JobAgentError as exc:
            if not (ranked and claims_watch.route_missing(exc)):
                raise
            # A server older than the ranked route: every claim is read, and ranked here.
            ranked = False
            claims = claims_watch.fetch_claims(client, **options, limit=limit, ranked=False)
        if not names:
            names.append(claims_watch.agent_names(client))
        return claims

    def agent_label(agent_id: UUID) -> str | None:
        return names[0](agent_id) if names and names[0] else None

    watch = claims_watch.ClaimsWatch(read, interval, stale, agents=agent_label, quiet_after=quiet)

    def frame(width: int, height: int) -> tuple[list[claims_watch.Line], bool]:
        lines = watch.frame(width, height)
        return lines, stop_when_stuck and watch.stuck > 0

    output.live(state, frame, interval=interval, sleep=sleep)
    return watch.stuck


def register(app: typer.Typer) -> None:
    """Add the ``inspect-claims`` command to ``app``."""
    app.command("inspect-claims")(inspect_claims)
