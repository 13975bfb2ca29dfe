"""The frame of ``inspect-claims --watch`` (pure: sizes, ranks, ids) and its outages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from jobagentctl.cli.claims_live import (
    STUCK_MARKS,
    Claims,
    ClaimsWatch,
    mark_of,
    rank,
    render,
    short_ids,
)
from jobagentctl.errors import AuthError, ServerUnavailable
from jobagentctl.models import JobClaim

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
AGENT = UUID("22222222-2222-4222-8222-222222222222")


def claim(state: str = "active", expires_in: float | None = 60, **fields: Any) -> JobClaim:
    leased = state != "unleased"
    return JobClaim(
        job_id=fields.pop("job_id", uuid4()),
        job_agent_id=AGENT,
        claim_id=uuid4() if leased else None,
        attempt=1,
        claimed_at=NOW - timedelta(minutes=5),
        claim_expires_at=NOW + timedelta(seconds=expires_in) if leased and expires_in else None,
        lease_seconds=60 if leased else None,
        last_heartbeat_at=fields.pop(
            "last_heartbeat_at", NOW - timedelta(seconds=10) if leased else None
        ),
        state=state,
        **fields,
    )


def claims_of(*items: JobClaim, total: int | None = None) -> Claims:
    counts: dict[str, int] = {}
    for item in items:
        counts[item.state] = counts.get(item.state, 0) + 1
    if total is not None:
        counts["active"] = counts.get("active", 0) + total - len(items)
    return Claims(list(items), counts, NOW)


def test_short_ids_are_unambiguous_within_the_frame() -> None:
    a = UUID("abcdef01-0000-4000-8000-000000000001")
    b = UUID("abcdef01-0000-4000-8000-000000000002")
    c = UUID("12345678-0000-4000-8000-000000000003")
    assert short_ids([c]) == {c: "1234567"}
    shown = short_ids([a, b, c, a])
    assert shown[a] != shown[b] and len(set(shown.values())) == 3
    assert all(len(s) == 32 for s in shown.values())  # a and b differ only in the last digit
    near = UUID("abcdef02-0000-4000-8000-000000000001")
    assert short_ids([a, near]) == {a: "abcdef01", near: "abcdef02"}


ALL = ["STATE", "JOB", "EXPIRES", "AGENT", "HEARTBEAT", "CLAIMED", "ATT", "LEASE", "CLAIM"]


@pytest.mark.parametrize(
    ("width", "kept"),
    [(200, 9), (80, 9), (70, 8), (60, 6), (50, 5), (40, 4), (30, 3), (20, 2), (10, 2)],
)
def test_columns_give_way_in_their_order(width: int, kept: int) -> None:
    rows = [claim("unleased"), claim("active"), claim("expired", -30)]
    frame = render(claims_of(*rows), None, width=width, height=10, now=NOW)
    assert frame[1].text.split() == ALL[:kept] or width < 17
    assert all(len(line.text) <= width for line in frame)
    # A state is never cut (but by a pane narrower than the state and the id).
    states = [line.text.split()[0] for line in frame[2:]]
    assert states == ["unleased", "active", "expired"] or width < 17
    assert [line.mark for line in frame[2:]] == ["unleased", "active", "expired"]


def test_the_summary_counts_every_kind_and_what_is_not_shown() -> None:
    rows = [claim("expired", -5), claim("active")]
    frame = render(claims_of(*rows, total=3051), None, width=80, height=3, now=NOW)
    assert len(frame) == 3  # summary, header, the one row that fits
    assert frame[0].text.startswith("3,051 claims: 1 expired, 3,050 active · 3,050 not shown")
    assert frame[2].text.startswith("expired")


def test_stale_and_unknown_kinds_rank_after_expired_and_before_active() -> None:
    silent = claim("active", 300, last_heartbeat_at=NOW - timedelta(minutes=3))
    quiet = claim("active", 10)
    expired = claim("expired", -1)
    ranked = rank([quiet, silent, expired], 120, NOW)
    assert ranked == [expired, silent, quiet]
    frame = render(claims_of(*ranked), 120, width=80, height=10, now=NOW)
    assert [line.mark for line in frame[2:]] == ["expired", "stale", "active"]
    # A kind a newer server counts (say "held") is named and ranked, not counted as stuck.
    counts = Claims([], {"active": 2, "held": 1, "expired": 1}, NOW)
    assert counts.stuck == 1
    assert render(counts, None, width=80, height=5, now=NOW)[0].text.startswith(
        "4 claims: 1 expired, 1 held, 2 active"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_shown_backed_off_and_survived() -> None:
    clock = Clock()
    answers: list[Any] = [
        claims_of(claim("active")),
        ServerUnavailable("cannot reach the server at http://x: Connection refused"),
        ServerUnavailable("cannot reach the server at http://x: Connection refused"),
        claims_of(claim("expired", -1)),
    ]
    reads: list[float] = []

    def read(limit: int) -> Claims:
        reads.append(clock.now)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, Claims)
        return answer

    watch = ClaimsWatch(read, 1.0, None, clock=clock)
    assert watch.frame(80, 24)[0].text.startswith("1 claim: 1 active")
    clock.now = 1.0
    frame = [line.text for line in watch.frame(80, 24)]
    assert frame[0].startswith("1 claim: 1 active")  # the last claims read stay
    assert frame[1].startswith("server unreachable since ")
    assert "next try in 2s: cannot reach the server" in frame[1]
    assert "Connection refused" in frame[1] + frame[2]
    clock.now = 2.0  # before the next try: no request, the frame is redrawn
    watch.frame(80, 24)
    clock.now = 3.0
    watch.frame(80, 24)
    assert "next try in 4s" in watch.frame(80, 24)[1].text  # backing off
    clock.now = 7.0
    frame = [line.text for line in watch.frame(80, 24)]
    assert reads == [0.0, 1.0, 3.0, 7.0]
    assert frame[0].startswith("1 claim: 1 expired")
    assert not any("unreachable" in line for line in frame)
    assert watch.stuck == 1


def test_other_errors_end_the_watch() -> None:
    def read(limit: int) -> Claims:
        raise AuthError("API key refused")

    with pytest.raises(AuthError):
        ClaimsWatch(read, 1.0, None).frame(80, 24)


def test_a_claim_waiting_for_ctrlplane_is_marked_delivering_and_not_stuck() -> None:
    # A gateway's claim whose report waits for ctrlplane: its heartbeats stopped (the holder
    # reported), yet it is neither stale nor stuck, and the table and the watch say so.
    waiting = claim("active", 30, last_heartbeat_at=NOW - timedelta(minutes=3), delivery="pending")
    assert mark_of(waiting, 120, NOW) == "delivering"
    frame = render(claims_of(waiting), 120, width=80, height=5, now=NOW)
    assert frame[2].mark == "delivering"
    assert "delivering" not in STUCK_MARKS  # --fail-if-stuck does not count it
