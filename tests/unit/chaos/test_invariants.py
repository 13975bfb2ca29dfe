"""The invariant checker must catch each kind of violation: a clean history passes, and one
broken detail at a time is named (a checker that cannot fail proves nothing)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tools.chaos.invariants import Evidence, Execution, Overlap, check, parse_executions
from tools.chaos.proxy import Exchange

T0 = 1_800_000_000.0
JOB = "11111111-1111-4111-8111-111111111111"
C1 = "c1c1c1c1-0000-4000-8000-000000000001"
C2 = "c2c2c2c2-0000-4000-8000-000000000002"
WS = "/api/v1/workspaces/99999999-9999-4999-8999-999999999999"
AGENT = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"


def iso(t: float) -> str:
    return datetime.fromtimestamp(T0 + t, UTC).isoformat().replace("+00:00", "Z")


def claim(
    t: float, claim_id: str, attempt: int, *, waited: float = 0.01, fault: str | None = None
) -> Exchange:
    return Exchange(
        slot=0,
        method="POST",
        path=f"{WS}/job-agents/{AGENT}/claim",
        request={"leaseSeconds": 2, "waitSeconds": 30},
        t_recv=T0 + t - waited,
        t_fwd=T0 + t - waited,
        t_resp=T0 + t,
        status=200,
        response={"id": JOB, "claimId": claim_id, "attempt": attempt},
        fault=fault,
        delivered=True,
    )


def write(
    kind: str,
    t: float,
    claim_id: str,
    status: int,
    *,
    code: str | None = None,
    body: dict[str, Any] | None = None,
) -> Exchange:
    path = f"{WS}/jobs/{JOB}/{'heartbeat' if kind == 'heartbeat' else 'status'}"
    return Exchange(
        slot=0,
        method="POST" if kind == "heartbeat" else "PUT",
        path=path,
        request={"claimId": claim_id, **(body or {})},
        t_recv=T0 + t,
        t_fwd=T0 + t,
        t_resp=T0 + t + 0.01,
        status=status,
        response={"code": code} if code else {"id": JOB},
        delivered=True,
    )


def clean() -> Evidence:
    """Job claimed by C1 (its agent died: expired at t=5), re-run and completed by C2."""
    return Evidence(
        lease_seconds=2,
        reap_interval=0.3,
        jobs={JOB: {"id": JOB, "status": "successful"}},
        attempts={
            JOB: [
                {
                    "attempt": 1,
                    "claimId": C1,
                    "claimedAt": iso(0),
                    "endedAt": iso(4.2),
                    "outcome": "expired",
                },
                {
                    "attempt": 2,
                    "claimId": C2,
                    "claimedAt": iso(6),
                    "endedAt": iso(7.61),
                    "outcome": "completed",
                },
            ]
        },
        claim_rows=0,
        executions=[
            Execution(JOB, 1, C1, 100, 0, T0 + 0.1, None),
            Execution(JOB, 2, C2, 101, 0, T0 + 6.1, T0 + 7.5),
        ],
        exchanges=[
            claim(0, C1, 1),
            write("heartbeat", 1.0, C1, 200),
            write("heartbeat", 5.5, C1, 409, code="CLAIM_LOST"),
            claim(6, C2, 2),
            write("status", 7.6, C2, 202, body={"status": "successful"}),
        ],
        reports=[
            {"jobId": JOB, "claimId": C2, "status": "successful", "reported": True, "_slot": 0}
        ],
    )


def violations(ev: Evidence, name: str) -> list[str]:
    return check(ev).violations[name]


def test_a_clean_history_passes_with_its_figures() -> None:
    result = check(clean())
    assert result.ok, result.summary()
    assert result.figures["lost jobs"] == 0
    assert result.figures["double completions"] == 0
    assert result.figures["re-runs"] == 1
    assert result.figures["stale heartbeats rejected (proxy)"] == 1
    # Expired at 4.2 s after its last renewal at 1.0 s: 3.2 s against a 2.3 s bound.
    assert result.figures["worst detection (s)"] == pytest.approx(3.2, abs=0.01)
    assert result.figures["detections over bound (outside outages)"] == 1


def test_an_answer_of_500_is_a_violation() -> None:
    """A fault (a backend terminated mid-operation) must answer 503, never 500: the suite
    counts 500s and fails on any."""
    ev = clean()
    assert check(ev).figures["answers of 500"] == 0
    ev.exchanges.append(write("heartbeat", 1.5, C1, 500, code="INTERNAL_ERROR"))
    result = check(ev)
    assert result.figures["answers of 500"] == 1
    assert not result.ok
    named = result.violations["no answer of 500 (a fault is a 503, never an internal error)"]
    assert len(named) == 1 and "heartbeat" in named[0]


def test_two_accepted_successes_are_a_double_completion() -> None:
    ev = clean()
    ev.exchanges.append(write("status", 2.0, C1, 202, body={"status": "successful"}))
    result = check(ev)
    assert result.figures["double completions"] == 1
    assert any(
        "2 accepted successful" in v
        for v in result.violations["exactly one accepted successful report"]
    )


def test_a_stale_heartbeat_that_was_accepted_is_caught() -> None:
    ev = clean()
    ev.exchanges.append(write("heartbeat", 6.5, C1, 200))
    found = violations(ev, "stale writes rejected")
    assert found and "stale heartbeat" in found[0] and "expired" in found[0]


def test_a_stale_status_that_was_accepted_is_caught() -> None:
    ev = clean()
    ev.exchanges.append(write("status", 6.5, C1, 202, body={"status": "failure"}))
    assert any("stale status" in v for v in violations(ev, "stale writes rejected"))


def test_a_repeated_terminal_status_is_an_idempotent_success() -> None:
    ev = clean()
    ev.exchanges.append(write("status", 9.0, C2, 202, body={"status": "successful"}))
    assert check(ev).ok


def test_the_current_claim_refused_is_caught() -> None:
    ev = clean()
    ev.exchanges.append(write("heartbeat", 7.0, C2, 409, code="CLAIM_LOST"))
    assert any("while the attempt was open" in v for v in violations(ev, "stale writes rejected"))


def test_a_job_left_in_progress_is_lost() -> None:
    ev = clean()
    ev.jobs[JOB]["status"] = "inProgress"
    ev.attempts[JOB][1].update(outcome=None, endedAt=None)
    ev.exchanges.pop()  # its success was never reported
    ev.reports = []
    ev.claim_rows = 1
    result = check(ev)
    assert result.figures["lost jobs"] == 1
    assert result.violations["every job terminal"]
    assert len(result.violations["no job left inProgress"]) == 3  # status, claim row, attempt


def test_an_execution_no_attempt_explains_is_caught() -> None:
    ev = clean()
    ev.executions.append(
        Execution(JOB, 3, "c3c3c3c3-0000-4000-8000-000000000003", 102, 1, T0 + 8, T0 + 9)
    )
    found = violations(ev, "attempts explain every re-run")
    assert any("no attempt row explains" in v for v in found)
    assert any("3 executions but 2 attempts" in v for v in found)


def test_a_claim_executed_twice_is_caught() -> None:
    ev = clean()
    ev.executions.append(Execution(JOB, 2, C2, 103, 1, T0 + 6.2, T0 + 7.0))
    assert any("executed 2 times" in v for v in violations(ev, "attempts explain every re-run"))


def test_a_completed_attempt_followed_by_another_claim_is_caught() -> None:
    ev = clean()
    ev.attempts[JOB][0]["outcome"] = "completed"
    result = check(ev)
    assert any(
        "ended completed yet the job was claimed again" in v
        for v in result.violations["attempts explain every re-run"]
    )
    assert result.figures["double completions"] == 1


def test_an_operator_requeue_after_the_job_completed_runs_it_again_by_request() -> None:
    """The harness picks a running job to requeue; when it completes before the request lands,
    the requeue runs it again: two successes, each explained, and no violation for it. The
    same history without the requeue is a double completion."""
    ev = clean()
    ev.attempts[JOB][0]["outcome"] = "completed"
    ev.attempts[JOB][0]["endedAt"] = iso(2.0)
    ev.executions[0] = Execution(JOB, 1, C1, 100, 0, T0 + 0.1, T0 + 1.9)
    ev.exchanges.append(write("status", 2.0, C1, 202, body={"status": "successful"}))
    ev.requeues = [(JOB, T0 + 2.1)]
    result = check(ev)
    assert not result.violations["attempts explain every re-run"], result.summary()
    assert not result.violations["exactly one accepted successful report"], result.summary()
    ev.requeues = []
    assert check(ev).violations["exactly one accepted successful report"]


def test_success_reported_before_the_work_ended_is_caught() -> None:
    ev = clean()
    ev.executions[1] = Execution(JOB, 2, C2, 101, 0, T0 + 6.1, T0 + 9.0)
    assert any(
        "before its execution ended" in v
        for v in violations(ev, "exactly one accepted successful report")
    )


def test_success_for_an_execution_that_never_finished_is_caught() -> None:
    ev = clean()
    ev.executions[1] = Execution(JOB, 2, C2, 101, 0, T0 + 6.1, None)
    assert any(
        "never finished" in v for v in violations(ev, "exactly one accepted successful report")
    )


def test_an_agent_success_the_server_never_accepted_is_caught() -> None:
    ev = clean()
    ev.reports.append(
        {"jobId": JOB, "claimId": C1, "status": "successful", "reported": True, "_slot": 0}
    )
    assert any(
        "the proxy saw no such accepted report" in v
        for v in violations(ev, "exactly one accepted successful report")
    )


def lease_lost_report(finished: float) -> dict[str, Any]:
    return {
        "jobId": JOB,
        "claimId": C1,
        "reason": "lease_lost",
        "heartbeats": 0,
        "finishedAt": iso(finished),
        "_slot": 0,
    }


def test_a_lease_given_up_with_no_fault_in_sight_is_caught() -> None:
    ev = clean()
    # The claim's long-poll waited 5 s; the agent dropped the job 0.2 s after getting it.
    ev.exchanges[0] = claim(0, C1, 1, waited=5.0)
    ev.exchanges.pop(1)
    ev.reports.append(lease_lost_report(0.2))
    found = violations(ev, "every lease loss explained by a fault")
    assert len(found) == 1 and "had been waiting 5.00s" in found[0]


@pytest.mark.parametrize(
    "explanation",
    [
        "none",
        "outage while the claim waited",
        "claim fault",
        "heartbeat fault",
        "outage",
        "paused",
        "requeued",
        "starved",
    ],
)
def test_a_lease_loss_counts_only_without_a_fault_nearby(explanation: str) -> None:
    ev = clean()
    fault = "delay_response:3.0" if explanation == "claim fault" else None
    ev.exchanges[0] = claim(0, C1, 1, waited=5.0, fault=fault)
    if explanation == "heartbeat fault":
        ev.exchanges[1].fault = "reset_after"
    if explanation == "outage":
        ev.downs = [(T0 + 0.5, T0 + 1.5)]
    if explanation == "outage while the claim waited":
        ev.downs = [(T0 - 4.8, T0 - 3.5)]  # the long-poll outlived it: the lease is younger
    if explanation == "paused":
        ev.pauses = [(0, T0 + 0.3, T0 + 3.0)]
    if explanation == "requeued":
        ev.requeues = [(JOB, T0 + 1.0)]
    # Given up 1.5 s in, 0.5 s after a heartbeat; "starved": 2.5 s without sending one.
    ev.reports.append(lease_lost_report(3.5 if explanation == "starved" else 1.5))
    found = violations(ev, "every lease loss explained by a fault")
    unexplained = explanation in ("none", "outage while the claim waited")
    assert len(found) == (1 if unexplained else 0), found


@pytest.mark.parametrize("watchdog", [True, False])
@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("agent_kill", "agent_kill"),
        ("agent_stop", "agent_stop"),
        ("frozen host", "frozen host"),
        ("requeued", "operator_requeue"),
        ("requeued, then killed", "agent_kill"),  # the kill explains it, the requeue not
        ("none", "other"),
    ],
)
def test_with_the_watchdog_an_overlap_after_an_agent_kill_or_stop_is_a_violation(
    fault: str, cause: str, watchdog: bool
) -> None:
    ev = clean()
    ev.watchdog = watchdog
    ev.overlaps = [Overlap(JOB, 2, 0, 1)]  # attempt 2 started while attempt 1's tree lived
    if fault in ("agent_kill", "requeued, then killed"):
        ev.kills = [(0, T0 + 1.5)]
    if fault.startswith("requeued"):
        ev.requeues = [(JOB, T0 + 1.2)]
    if fault in ("agent_stop", "frozen host"):
        ev.pauses = [(0, T0 + 1.5, T0 + 5.0)]
    if fault == "frozen host":
        ev.freezes = list(ev.pauses)
    result = check(ev)
    assert result.figures[f"overlaps: {cause}"] == 1
    assert result.figures["overlapping executions (zombies)"] == 1
    found = result.violations["no overlap after an agent kill or stop (watchdog)"]
    # Only a frozen host (and what no agent fault explains) may overlap with the watchdog on.
    assert len(found) == (1 if watchdog and cause in ("agent_kill", "agent_stop") else 0), found
    # An operator's requeue never overlaps, watchdog or not (revoked claims).
    requeued = result.violations["no overlap after an operator's requeue"]
    assert len(requeued) == (1 if cause == "operator_requeue" else 0), requeued


def test_parse_executions_pairs_starts_with_ends_and_flags_junk() -> None:
    text = "\n".join(
        [
            f"start {JOB} 1 {C1} 100 0 {T0 + 0.1}",
            f"start {JOB} 2 {C2} 101 1 {T0 + 6.1}",
            f"end {JOB} 2 {C2} 101 1 {T0 + 7.5}",
            "garbage line",
            f"end {JOB} 3 {C2} 999 1 {T0 + 9}",
        ]
    )
    executions, bad = parse_executions(text)
    assert [(e.attempt, e.ended) for e in executions] == [(1, None), (2, T0 + 7.5)]
    assert executions[1].slot == 1 and executions[1].pid == 101
    assert bad[0] == "garbage line" and "end without start" in bad[1]
