"""Gateway mode against the ctrlplane stand-in: leased claims (next and by id), heartbeats that
never reach ctrlplane, fenced reports forwarded, the outbox across a ctrlplane outage. Both
databases."""

from __future__ import annotations

import time
import uuid

from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.databases import expire_claims
from tests.fixtures.waiting import wait_until
from tests.system.gateway.conftest import GATEWAY_SETTINGS, GatewayServer


def _upstream_status(ctrlplane: CtrlplaneStandIn, job_id: str) -> str:
    return ctrlplane.job(job_id).status


def _status_puts(ctrlplane: CtrlplaneStandIn, job_id: str) -> int:
    return sum(
        1
        for method, path, _ in ctrlplane.requests()
        if method == "PUT" and path.endswith(f"/jobs/{job_id}/status")
    )


def _metrics(gateway: GatewayServer) -> str:
    status, text = gateway.request("GET", "/metrics", api_key=None)
    assert status == 200
    return str(text)


def _failed_reports(gateway: GatewayServer) -> float:
    line = 'jobagentctl_upstream_requests_total{operation="set_status",outcome="error"}'
    for row in _metrics(gateway).splitlines():
        if row.startswith(line):
            return float(row.split()[-1])
    return 0.0


def test_claim_next_heartbeat_and_fenced_report(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent, dispatch_context={"repo": "acme/app"})
    assert gateway.workspace_id == ctrlplane.workspace_id  # ctrlplane's id, not a new one

    status, claimed = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 30, "waitSeconds": 0}
    )
    assert status == 200, claimed
    assert claimed["id"] == job and claimed["attempt"] == 1 and claimed["leaseSeconds"] == 30
    assert claimed["dispatchContext"] == {"repo": "acme/app"}
    assert _upstream_status(ctrlplane, job) == "in_progress"

    # Heartbeats extend the lease here only: not one request reaches ctrlplane.
    seen = len(ctrlplane.requests())
    for _ in range(3):
        status, beat = gateway.request(
            "POST", f"jobs/{job}/heartbeat", {"claimId": claimed["claimId"]}
        )
        assert status == 200, beat
    assert len(ctrlplane.requests()) == seen

    # A stale claim id is refused here: nothing is forwarded.
    stale = {"status": "successful", "claimId": str(uuid.uuid4())}
    status, body = gateway.request("PUT", f"jobs/{job}/status", stale)
    assert status == 409 and body["code"] == "CLAIM_MISMATCH", body
    assert _status_puts(ctrlplane, job) == 0
    assert _upstream_status(ctrlplane, job) == "in_progress"

    report = {"status": "successful", "claimId": claimed["claimId"], "message": "done"}
    status, body = gateway.request("PUT", f"jobs/{job}/status", report)
    assert status == 202, body
    assert _upstream_status(ctrlplane, job) == "successful"
    # The repeat is answered as a success, and not sent again.
    status, body = gateway.request("PUT", f"jobs/{job}/status", report)
    assert status == 202, body
    assert _status_puts(ctrlplane, job) == 1

    status, attempts = gateway.request("GET", f"jobs/{job}/attempts")
    assert status == 200
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "completed")]
    status, claims = gateway.request("GET", "job-claims")
    assert status == 200 and claims["items"] == []
    # The heartbeat of the ended claim: 409 with the job's status.
    status, body = gateway.request("POST", f"jobs/{job}/heartbeat", {"claimId": claimed["claimId"]})
    assert status == 409 and body["details"]["jobStatus"] == "successful", body


def test_claim_by_id_and_a_claim_lost_upstream(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    first, second = ctrlplane.seed_job(agent), ctrlplane.seed_job(agent)
    status, claimed = gateway.request(
        "POST", f"job-agents/{agent}/jobs/{second}/claim", {"leaseSeconds": 20}
    )
    assert status == 200 and claimed["id"] == second and claimed["claimId"], claimed
    status, body = gateway.request(
        "POST", f"job-agents/{agent}/jobs/{second}/claim", {"leaseSeconds": 20}
    )
    assert status == 409, body

    # A V1 agent takes the first job in ctrlplane between the gateway's listing and its claim:
    # ctrlplane's 409 decides, the gateway's local claim is undone (no attempt left behind).
    def steal(request: object) -> None:
        if getattr(request, "method", "") == "post" and first in getattr(request, "path", ""):
            ctrlplane.state.jobs[first].status = "in_progress"

    ctrlplane.before = steal
    status, body = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 20, "waitSeconds": 0}
    )
    ctrlplane.before = None
    assert status == 204, body
    status, attempts = gateway.request("GET", f"jobs/{first}/attempts")
    assert status == 200 and attempts == [], attempts


def test_report_accepted_while_ctrlplane_is_down_is_delivered_later(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    agent = ctrlplane.add_agent("pull")
    job = ctrlplane.seed_job(agent)
    status, claimed = gateway.request(
        "POST", f"job-agents/{agent}/claim", {"leaseSeconds": 5, "waitSeconds": 0}
    )
    assert status == 200, claimed
    port = ctrlplane.port
    ctrlplane.stop()
    report = {"status": "failure", "claimId": claimed["claimId"], "message": "exit code 3"}
    status, body = gateway.request("PUT", f"jobs/{job}/status", report)
    assert status == 202 and "delivering" in body["message"], body
    # Held while it waits for delivery: its lease runs out, the reaper (5 passes a second)
    # leaves it alone while the outbox tries twice more (2 s apart at least).
    expire_claims(gateway.database_url, [job])
    wait_until(lambda: _failed_reports(gateway) >= 3, what="two more tries of the report")
    status, ready = gateway.request("GET", "/readyz", api_key=None)
    assert status == 200 and ready["upstream"] == "down", ready
    status, claims = gateway.request("GET", "job-claims")
    assert [(c["jobId"], c.get("delivery")) for c in claims["items"]] == [(job, "pending")]
    assert "jobagentctl_upstream_pending_operations 1.0" in _metrics(gateway)
    # Heartbeats need no ctrlplane: the holder's still work.
    status, beat = gateway.request("POST", f"jobs/{job}/heartbeat", {"claimId": claimed["claimId"]})
    assert status == 200, beat

    ctrlplane.start(port=port)
    wait_until(lambda: _upstream_status(ctrlplane, job) == "failure", what="report delivered")
    wait_until(
        lambda: (
            gateway.request("GET", f"jobs/{job}/attempts")[1] == []
            or gateway.request("GET", f"jobs/{job}/attempts")[1][0]["outcome"] == "completed"
        ),
        what="attempt ended here",
    )
    status, attempts = gateway.request("GET", f"jobs/{job}/attempts")
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "completed")]
    assert _status_puts(ctrlplane, job) >= 1
    assert ctrlplane.job(job).status == "failure"  # never requeued
    assert "jobagentctl_upstream_pending_operations 0.0" in _metrics(gateway)


def test_a_claim_without_a_wait_is_not_answered_from_an_old_listing(
    gateway: GatewayServer, ctrlplane: CtrlplaneStandIn
) -> None:
    """The agent's shared poll lists ctrlplane only while claimers wait; a claim that came
    after a quiet spell was answered from the listing of the last one (204 for a job that
    `list` shows queued): now a listing older than one poll interval is asked again."""
    agent = ctrlplane.add_agent("pull")
    empty = {"leaseSeconds": 30, "waitSeconds": 0}
    status, _ = gateway.request("POST", f"job-agents/{agent}/claim", empty)
    assert status == 204  # the poll's listing: nothing queued
    listings = _agent_listings(ctrlplane, agent)
    # The listing grows older than the poll interval while nobody waits: time passing is
    # the condition itself (older is older however busy the machine).
    time.sleep(3 * float(GATEWAY_SETTINGS["upstream_poll_interval"]))
    job = ctrlplane.seed_job(agent)
    status, claimed = gateway.request("POST", f"job-agents/{agent}/claim", empty)
    assert status == 200, claimed
    assert claimed["id"] == job
    assert _agent_listings(ctrlplane, agent) == listings + 1


def _agent_listings(ctrlplane: CtrlplaneStandIn, agent: str) -> int:
    return sum(
        1
        for method, path, _ in ctrlplane.requests()
        if method == "GET" and path.endswith(f"/job-agents/{agent}/jobs")
    )
