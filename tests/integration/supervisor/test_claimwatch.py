"""The claim long-poll thread: a cancel reaches the command at once whatever the lease, a claim
that ended otherwise is confirmed by a heartbeat, servers without the endpoint and V1 claims run
as they would without it. Real child processes, a scripted client."""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from pathlib import Path

import pytest

from jobagentctl.errors import ClaimLost, ServerUnavailable
from jobagentctl.models import JobStatus, JobWait
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.lease.cancel_poll import MIN_REOPEN_SECONDS, RETRY_CAP, ClaimWatcher
from jobagentctl.supervisor.lease.job_lease import Beat, LeaseNews
from tests.fixtures.fake_client import FakeClient, claimed_job
from tests.fixtures.supervisor import DEADLINE, options, reports, run, sh, trap_reason

LONG_LEASE = 300  # heartbeats every 100 s: none during these tests


def answer_when(event: threading.Event, *, status: JobStatus, held: bool = False) -> JobWait:
    """A long-poll that answers when ``event`` is set (or, held, after the deadline)."""
    event.wait(DEADLINE)
    return JobWait(job_id=uuid.uuid4(), status=status, claim_held=held)


def test_a_cancel_seen_by_the_long_poll_stops_the_child_before_any_heartbeat(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "ready"
    cancelled = threading.Event()

    def wait(_: int) -> JobWait:
        # The operator cancels once the command runs; the server answers the long-poll.
        while not ready.exists():
            time.sleep(0.02)
        cancelled.set()
        return answer_when(cancelled, status=JobStatus.CANCELLED)

    client = FakeClient(jobs=[claimed_job(lease_seconds=LONG_LEASE)], on_wait=wait)
    # --timeout: without the long-poll the run would end by it, not by the cancel.
    opts = options(tmp_path, sh(trap_reason(tmp_path)), timeout=DEADLINE)
    code, _, records = run(client, opts)
    assert code == 143
    assert (tmp_path / "reason").read_text() == "cancelled\n"
    assert reports(client) == []
    assert client.named("heartbeat") == []  # it was the long-poll, not a heartbeat
    [call] = client.named("wait_claim")
    assert call.kwargs["claim_id"] is not None and call.kwargs["wait_seconds"] > 0
    assert (records[0]["status"], records[0]["reason"]) == ("cancelled", "cancelled")


def test_a_claim_ended_otherwise_is_confirmed_by_a_heartbeat_then_requeued(
    tmp_path: Path,
) -> None:
    def requeued(_: int) -> JobWait:
        while not (tmp_path / "ready").exists():
            time.sleep(0.02)
        return JobWait(job_id=uuid.uuid4(), status=JobStatus.QUEUED, claim_held=False)

    def lost(_: int) -> None:
        raise ClaimLost("claim expired", details={"jobStatus": "queued"})

    job = claimed_job(lease_seconds=LONG_LEASE)
    client = FakeClient(jobs=[job], on_wait=requeued, on_heartbeat=lost)
    opts = options(tmp_path, sh(trap_reason(tmp_path)), timeout=DEADLINE)
    code, logs, _ = run(client, opts)
    # Queued while the lease held: an operator's requeue, said as such (exit 75 as a lost lease).
    assert code == 75
    assert (tmp_path / "reason").read_text() == "requeued\n"
    assert len(client.named("heartbeat")) == 1  # the confirmation
    assert reports(client) == []
    assert any("was requeued by an operator" in line for line in logs)


def test_a_heartbeat_that_still_holds_the_claim_wins_over_the_long_poll(tmp_path: Path) -> None:
    # The long-poll says "not held" (a race, a confused server), the heartbeat says it is:
    # the job goes on and is reported; the watch only re-opens at most once a second.
    answers = {"first": True}

    def wait(_: int) -> JobWait:
        if answers.pop("first", False):
            return JobWait(job_id=uuid.uuid4(), status=JobStatus.SUCCESSFUL, claim_held=False)
        return JobWait(job_id=uuid.uuid4(), status=JobStatus.IN_PROGRESS, claim_held=True)

    script = f"while [ ! -e {tmp_path}/go ]; do sleep 0.05; done"
    client = FakeClient(jobs=[claimed_job(lease_seconds=LONG_LEASE)], on_wait=wait)

    def go() -> None:
        deadline = time.monotonic() + DEADLINE
        while len(client.named("wait_claim")) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        (tmp_path / "go").touch()

    threading.Thread(target=go, daemon=True).start()
    started = time.monotonic()
    code, _, _ = run(client, options(tmp_path, sh(script)))
    took = time.monotonic() - started
    assert code == 0
    assert len(client.named("heartbeat")) == 1
    assert reports(client)[0][0] is JobStatus.SUCCESSFUL
    # Three long-polls at least a second apart each.
    assert took >= 2 * MIN_REOPEN_SECONDS


def test_a_server_without_the_long_poll_is_asked_once_and_the_job_runs(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job(lease_seconds=LONG_LEASE)])  # wait: unsupported
    code, _, _ = run(client, options(tmp_path, ["sleep", "1.5"]))
    assert code == 0
    assert len(client.named("wait_claim")) == 1
    assert reports(client)[0][0] is JobStatus.SUCCESSFUL


def test_an_unleased_v1_claim_is_never_watched(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job(leased=False)])
    code, _, _ = run(client, options(tmp_path, ["true"], lease_seconds=0))
    assert code == 0
    assert client.named("wait_claim") == []


# --- the thread alone ---------------------------------------------------------------------------


def watcher(
    client: FakeClient, verdicts: list[tuple[Beat, str]], confirm: Beat = Beat.LEASE_LOST
) -> ClaimWatcher:
    job_id = uuid.uuid4()

    def post(news: object) -> None:
        assert isinstance(news, LeaseNews) and news.job_id == job_id
        verdicts.append((news.beat, news.why))

    return ClaimWatcher(
        client,
        job_id,
        uuid.uuid4(),
        confirm=lambda: confirm,
        post=post,
        log=Log(info=lambda _: None, warn=lambda _: None),
        rng=random.Random(1),
    )


def test_transient_failures_are_retried_no_more_than_once_a_second() -> None:
    times: list[float] = []

    def flaky(n: int) -> JobWait:
        times.append(time.monotonic())
        if n <= 2:
            raise ServerUnavailable("connection refused")
        return JobWait(job_id=uuid.uuid4(), status=JobStatus.CANCELLED, claim_held=False)

    verdicts: list[tuple[Beat, str]] = []
    client = FakeClient(on_wait=flaky)
    w = watcher(client, verdicts)
    w.start()  # not stopped: it ends by itself with the verdict
    deadline = time.monotonic() + DEADLINE
    while w.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert verdicts == [(Beat.CANCELLED, "the job was cancelled")]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 2 and min(gaps) >= MIN_REOPEN_SECONDS, gaps
    assert client.closed == 1  # the thread closes its own client


@pytest.mark.parametrize("error", [ServerUnavailable("down"), None])
def test_stopped_it_reports_nothing(error: Exception | None) -> None:
    release = threading.Event()

    def wait(_: int) -> JobWait:
        release.wait(DEADLINE)
        if error is not None:
            raise error
        return JobWait(job_id=uuid.uuid4(), status=JobStatus.CANCELLED, claim_held=False)

    verdicts: list[tuple[Beat, str]] = []
    client = FakeClient(on_wait=wait)
    w = watcher(client, verdicts)
    w.start()
    w.stop()  # the job ended while the long-poll was open
    release.set()  # the server answers (the claim ended with the report)
    w.stop(DEADLINE)
    assert not w.running
    assert verdicts == []
    assert len(client.named("wait_claim")) == 1


class _InstantStop(threading.Event):
    """The watcher's stop event, whose waits return at once and are written down (the delays
    the watcher chose), so a long outage is replayed without waiting it out."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.waits.append(timeout)
        return self.is_set()


def test_after_a_long_outage_the_long_poll_is_back_within_a_few_seconds() -> None:
    """A retry backoff that doubled up to a minute would make a cancel take a minute to arrive
    once the server was back: it is capped at a few seconds."""
    outage = 20  # failures in a row: minutes of outage at the old cap

    def down_then_cancelled(n: int) -> JobWait:
        if n <= outage:
            raise ServerUnavailable("connection refused")
        return JobWait(job_id=uuid.uuid4(), status=JobStatus.CANCELLED, claim_held=False)

    verdicts: list[tuple[Beat, str]] = []
    client = FakeClient(on_wait=down_then_cancelled)
    w = watcher(client, verdicts)
    stop = w._stop = _InstantStop()
    w.start()
    deadline = time.monotonic() + DEADLINE
    while w.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert verdicts == [(Beat.CANCELLED, "the job was cancelled")]
    assert len(stop.waits) == outage
    # Never more often than about once a second, never less often than every 4 s: the first
    # long-poll after the outage is open at most 4 s after the server came back.
    assert min(stop.waits) >= MIN_REOPEN_SECONDS
    assert max(stop.waits) <= RETRY_CAP <= 5.0
    assert stop.waits[-1] > 1.5  # the backoff did grow (jitter 50-100 % of 2 s, then 4 s)
