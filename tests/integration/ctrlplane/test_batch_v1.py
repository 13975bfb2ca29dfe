"""Batching against the ctrlplane stand-in: a V1-only server has neither
claim-next's ``limit`` nor ``claimNext``; the client claims the batch by id and never sends
``claimNext`` once it knows the server is V1-only."""

from __future__ import annotations

from uuid import UUID

from jobagentctl.models import ClaimNext, JobStatus
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn, Request
from tests.integration.ctrlplane.test_client_v1 import Warnings, claim_routes, client_for


def test_a_batch_on_a_v1_server_is_claimed_by_id_oldest_first(
    ctrlplane: CtrlplaneStandIn,
) -> None:
    agent = ctrlplane.add_agent()
    jobs = [ctrlplane.seed_job(agent) for _ in range(4)]
    warnings = Warnings()
    with client_for(ctrlplane, warnings) as client:
        batch = client.claim_batch(UUID(agent), lease_seconds=60, wait_seconds=0, limit=3)
        rest = client.claim_batch(UUID(agent), lease_seconds=60, wait_seconds=0, limit=3)
    assert [str(j.id) for j in batch] == jobs[:3]
    assert [str(j.id) for j in rest] == jobs[3:]
    assert all(j.claim_id is None for j in batch + rest)  # V1: no claim id, no lease
    assert [ctrlplane.job(j).status for j in jobs] == ["in_progress"] * 4
    assert len(claim_routes(ctrlplane, f"/job-agents/{agent}/claim")) == 1  # tried once
    assert len(warnings) == 1


def test_claim_next_is_not_sent_to_a_server_known_to_be_v1_only(
    ctrlplane: CtrlplaneStandIn,
) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent)
    bodies: list[object] = []

    def record(request: Request) -> None:
        if request.method.upper() == "PUT" and request.path.endswith("/status"):
            bodies.append(request.body)

    ctrlplane.before = record
    with client_for(ctrlplane) as client:
        claimed = client.claim_next(UUID(agent), lease_seconds=60, wait_seconds=0)  # learns V1
        accepted = client.update_status(
            claimed.id, JobStatus.SUCCESSFUL, claim_next=ClaimNext(limit=2)
        )
    assert accepted.claimed is None  # nothing claimed: the caller claims as usual
    [body] = bodies
    assert isinstance(body, dict) and "claimNext" not in body
    assert ctrlplane.job(job).status == "successful"
