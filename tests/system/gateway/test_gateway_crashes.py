"""The gateway killed between any two of its steps (an injected ``os._exit`` at a named step,
``JOBAGENTCTL_SERVER_GATEWAY_CRASH_AT``), then started again: the job is neither lost, nor left
in progress in ctrlplane without a live lease, nor run twice. Both databases."""

from __future__ import annotations

import pytest

from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn, Request, api_error
from tests.fixtures.waiting import wait_until
from tests.system.gateway.conftest import GatewayFactory, GatewayServer


def _attempts(gateway: GatewayServer, job: str) -> list[tuple[int, str | None]]:
    status, attempts = gateway.request("GET", f"jobs/{job}/attempts")
    assert status == 200, attempts
    return [(a["attempt"], a["outcome"]) for a in attempts]


def _crashed(gateway: GatewayServer) -> None:
    assert gateway.proc is not None
    assert gateway.proc.wait(60) == 137, gateway.log()[-3000:]
    assert "crash injected" in gateway.log()


def _claim(gateway: GatewayServer, agent: str, lease: int, wait: float = 0) -> dict[str, object]:
    status, claimed = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": lease, "waitSeconds": wait}
    )
    assert status == 200, claimed
    assert isinstance(claimed, dict)
    return claimed


def _restart(gateway: GatewayServer) -> None:
    gateway.settings.pop("gateway_crash_at", None)
    gateway.start()


def _claim_and_finish(gateway: GatewayServer, agent: str) -> dict[str, object]:
    """The job claimed again (waiting for it to be claimable) and completed."""
    claimed = _claim(gateway, agent, 30, wait=30)
    report = {"status": "successful", "claimId": claimed["claimId"]}
    status, body = gateway.request("PUT", f"jobs/{claimed['id']}/status", report)
    assert status == 202, body
    return claimed


@pytest.mark.parametrize("step", ["claimed-locally", "claimed-upstream"])
def test_crash_while_claiming(
    step: str, gateway_factory: GatewayFactory, ctrlplane: CtrlplaneStandIn
) -> None:
    gateway = gateway_factory(gateway_crash_at=step).start()
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    with pytest.raises(OSError):  # the connection dies with the process
        gateway.request("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 2})
    _crashed(gateway)
    expected = "queued" if step == "claimed-locally" else "in_progress"
    assert ctrlplane.job(job).status == expected
    _restart(gateway)
    # Nobody got the job: its lease (2 s) runs out and the job is queued in ctrlplane again
    # (left so when the claim never reached it), then claimed and run once.
    wait_until(lambda: ctrlplane.job(job).status == "queued", what="queued in ctrlplane")
    claimed = _claim_and_finish(gateway, agent)
    assert claimed["id"] == job and claimed["attempt"] == 2
    assert ctrlplane.job(job).status == "successful"
    assert _attempts(gateway, job) == [(1, "expired"), (2, "completed")]


@pytest.mark.parametrize("step", ["report-accepted", "report-delivered"])
def test_crash_while_reporting(
    step: str, gateway_factory: GatewayFactory, ctrlplane: CtrlplaneStandIn
) -> None:
    gateway = gateway_factory(gateway_crash_at=step).start()
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    sent = _record_statuses(ctrlplane)
    claimed = _claim(gateway, agent, 2)
    report = {"status": "successful", "claimId": claimed["claimId"]}
    with pytest.raises(OSError):
        gateway.request("PUT", f"jobs/{job}/status", report)
    _crashed(gateway)
    _restart(gateway)
    # The accepted report is delivered after the restart, and never followed by a requeue,
    # though the claim's lease ran out meanwhile.
    wait_until(lambda: _attempts(gateway, job) == [(1, "completed")], what="attempt ended")
    assert ctrlplane.job(job).status == "successful"
    # The agent retrying its report (it saw the connection drop) is answered as a repeat.
    status, body = gateway.request("PUT", f"jobs/{job}/status", report)
    assert status == 202, body
    assert set(sent) == {"successful"}, sent  # never a requeue


def _record_statuses(ctrlplane: CtrlplaneStandIn) -> list[str]:
    """The statuses the gateway sends to ctrlplane from now on, in order."""
    sent: list[str] = []

    def record(request: Request) -> None:
        if request.method == "put" and request.path.endswith("/status"):
            sent.append(str(request.body.get("status")))

    ctrlplane.before = record
    return sent


@pytest.mark.parametrize("step", ["requeue-recorded", "requeue-delivered"])
def test_crash_while_requeueing(
    step: str, gateway_factory: GatewayFactory, ctrlplane: CtrlplaneStandIn
) -> None:
    gateway = gateway_factory(gateway_crash_at=step).start()
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    _claim(gateway, agent, 1)  # an agent that never heartbeats
    _crashed(gateway)  # the reaper's pass reached the step
    _restart(gateway)
    wait_until(lambda: ctrlplane.job(job).status == "queued", what="queued in ctrlplane")
    claimed = _claim_and_finish(gateway, agent)
    assert claimed["attempt"] == 2
    assert ctrlplane.job(job).status == "successful"
    assert _attempts(gateway, job) == [(1, "expired"), (2, "completed")]


def test_no_claim_while_a_requeue_is_undelivered(
    gateway_factory: GatewayFactory, ctrlplane: CtrlplaneStandIn
) -> None:
    """Killed after the lease was recorded but before ctrlplane's claim: ctrlplane lists the
    job as queued all along. After the restart the lease runs out and a requeue is in the
    outbox; while it cannot be delivered (ctrlplane fails the job's read), the gateway must not
    hand the job out: the requeue, delivered later, would send that new claim back to queued."""
    gateway = gateway_factory(gateway_crash_at="claimed-locally").start()
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    with pytest.raises(OSError):
        gateway.request("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 1})
    _crashed(gateway)

    def fail_job_reads(request: Request) -> None:
        if request.method == "get" and request.path.endswith(f"/jobs/{job}"):
            raise api_error("upstream trouble", 503)

    ctrlplane.before = fail_job_reads
    _restart(gateway)
    wait_until(lambda: _attempts(gateway, job) == [(1, "expired")], what="the lease reaped")
    status, body = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 30, "waitSeconds": 2}
    )
    assert status == 204, body
    sent = _record_statuses(ctrlplane)  # from here: no more failing reads
    claimed = _claim_and_finish(gateway, agent)
    assert claimed["attempt"] == 2
    assert sent == ["successful"], sent  # the requeue was not sent over the new claim
    assert ctrlplane.job(job).status == "successful"
