"""Heartbeat timing, the local lease deadline, and how each answer is classified."""

from __future__ import annotations

import random
import threading
import time

import pytest

from jobagentctl.errors import (
    AuthError,
    ClaimLost,
    ClaimMismatch,
    NotFound,
    ProtocolError,
    ServerError,
    ServerUnavailable,
)
from jobagentctl.models import heartbeat_interval
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.lease.heartbeat import Heartbeater, backoff_delay
from jobagentctl.supervisor.lease.job_lease import Beat, Lease, LeaseNews
from jobagentctl.supervisor.protocol import is_transient
from tests.fixtures.fake_client import FakeClient, claimed_job


@pytest.mark.parametrize(
    ("lease", "interval"), [(1, 1.0), (2, 1.0), (3, 1.0), (30, 10.0), (60, 20.0), (600, 60.0)]
)
def test_interval_is_a_third_of_the_lease_within_1_and_60_seconds(
    lease: int, interval: float
) -> None:
    assert heartbeat_interval(lease) == interval


def make(
    client: FakeClient,
    *,
    sent_at: float = 100.0,
    lease: int = 30,
    posted: threading.Event | None = None,
) -> tuple[Heartbeater, list[tuple[Beat, str]], list[str], list[float]]:
    """A heartbeater on a fake clock; the verdicts it posted, its warnings, and the clock.
    ``posted`` is set when it posts news."""
    job = claimed_job(lease_seconds=lease)
    assert job.claim_id is not None
    verdicts: list[tuple[Beat, str]] = []
    logs: list[str] = []
    now = [sent_at]

    def post(news: object) -> None:
        assert isinstance(news, LeaseNews) and news.job_id == job.id
        verdicts.append((news.beat, news.why))
        if posted is not None:
            posted.set()

    hb = Heartbeater(
        client,
        job.id,
        job.claim_id,
        Lease(sent_at, lease),
        post=post,
        log=Log(info=logs.append, warn=logs.append, debug=lambda _: None),
        rng=random.Random(7),
        clock=lambda: now[0],
    )
    return hb, verdicts, logs, now


def test_each_sleep_is_75_to_100_percent_of_the_interval() -> None:
    hb, *_ = make(FakeClient(), lease=30)
    delays = [hb.next_delay(0) for _ in range(500)]
    assert min(delays) >= 7.5
    assert max(delays) <= 10.0
    assert max(delays) - min(delays) > 1.5  # really jittered


def test_backoff_doubles_up_to_the_interval_with_jitter() -> None:
    rng = random.Random(1)
    for failures, cap in [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (10, 10.0), (60, 10.0)]:
        delays = [backoff_delay(failures, 10.0, rng) for _ in range(200)]
        assert cap * 0.5 <= min(delays)
        assert max(delays) <= cap


def test_a_successful_heartbeat_moves_the_deadline_from_its_send_time() -> None:
    hb, verdicts, _, now = make(FakeClient(), sent_at=100.0, lease=30)
    assert hb.lease.deadline == 130.0
    now[0] = 120.0
    assert hb.beat_once() is Beat.OK
    # The fake grants 3 s: the deadline counts from the send time (120), not from "now".
    assert hb.lease.deadline == 130.0  # never moves back
    now[0] = 129.0
    assert hb.beat_once() is Beat.OK
    assert hb.lease.deadline == 132.0
    assert (hb.beats, hb.failures, verdicts) == (2, 0, [])


@pytest.mark.parametrize(
    ("error", "beat"),
    [
        (ClaimLost("gone", details={"jobStatus": "cancelled"}), Beat.CANCELLED),
        # Queued again while the lease holds: only an operator does that (not the reaper).
        (ClaimLost("gone", details={"jobStatus": "queued"}), Beat.REQUEUED),
        (ClaimLost("gone", details={"jobStatus": "failure"}), Beat.LEASE_LOST),
        (ClaimLost("gone"), Beat.LEASE_LOST),
        (ClaimMismatch("another attempt holds it"), Beat.LEASE_LOST),
        (NotFound("no such job"), Beat.JOB_GONE),
    ],
)
def test_a_definitive_answer_ends_the_loop_with_a_verdict(error: Exception, beat: Beat) -> None:
    def refuse(_: int) -> None:
        raise error

    hb, verdicts, _, _ = make(FakeClient(on_heartbeat=refuse))
    assert hb.beat_once() is beat
    assert [v for v, _ in verdicts] == [beat]
    assert hb.beat_once() is beat  # after the verdict nobody listens: no second report
    assert len(verdicts) == 1


@pytest.mark.parametrize(
    "error",
    [
        ServerUnavailable("connection refused"),
        ServerUnavailable("too many requests", status=429),
        ServerError("boom", status=500),
        AuthError("key revoked"),
        RuntimeError("a bug"),
    ],
)
def test_other_failures_are_counted_logged_and_retried(error: Exception) -> None:
    def fail(_: int) -> None:
        raise error

    hb, verdicts, logs, _ = make(FakeClient(on_heartbeat=fail), sent_at=100.0, lease=30)
    assert hb.beat_once() is Beat.RETRY
    assert (hb.beats, hb.failures, verdicts) == (0, 1, [])
    assert hb.lease.deadline == 130.0
    assert "heartbeat failed" in logs[0]


def test_transient_errors() -> None:
    assert is_transient(ServerUnavailable("down"))
    assert is_transient(ServerError("500"))
    assert is_transient(ProtocolError("slow down", status=429))
    assert not is_transient(ProtocolError("garbage"))
    assert not is_transient(AuthError("no"))
    assert not is_transient(ClaimLost("gone"))


def test_the_thread_beats_until_stopped_then_stops_promptly() -> None:
    beaten = threading.Event()

    def count(n: int) -> None:
        if n >= 3:
            beaten.set()

    hb, _, _, _ = make(FakeClient(on_heartbeat=count))
    hb.next_delay = lambda failures_in_a_row: 0.01  # type: ignore[method-assign]
    hb.start()
    assert beaten.wait(30)
    hb.stop(30)
    assert not hb.running
    stopped_at = hb.beats
    time.sleep(0.05)  # would be several beats if the thread were still running
    assert hb.beats == stopped_at


def test_the_thread_retries_failures_then_reports_the_verdict() -> None:
    done = threading.Event()

    def flaky(n: int) -> None:
        if n <= 2:
            raise ServerUnavailable("down")
        if n == 3:
            return
        raise ClaimLost("gone", details={"jobStatus": "cancelled"})

    client = FakeClient(on_heartbeat=flaky)
    hb, verdicts, _, _ = make(client, posted=done)
    delays: list[int] = []

    def fast(failures_in_a_row: int) -> float:
        delays.append(failures_in_a_row)
        return 0.01

    hb.next_delay = fast  # type: ignore[method-assign]
    hb.start()
    assert done.wait(30)
    hb.stop(30)
    assert [v for v, _ in verdicts] == [Beat.CANCELLED]
    assert (hb.beats, hb.failures) == (1, 2)
    assert delays == [0, 1, 2, 0]  # backoff after each failure, reset by the success
