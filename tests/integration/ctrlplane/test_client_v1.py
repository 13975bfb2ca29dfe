"""The client against the ctrlplane stand-in: job shapes, V1 claim fallback, slugs, filters."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest

from jobagentctl import errors
from jobagentctl.client import Client, ConnectionOptions, V1Pacing
from jobagentctl.models import JobStatus
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn, Request


class Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


def client_for(
    server: CtrlplaneStandIn, warnings: Warnings | None = None, *, workspace: str | None = None
) -> Client:
    return Client(
        server.url,
        server.api_key,
        workspace or server.workspace_id,
        ConnectionOptions(timeout=30),
        warn=warnings if warnings is not None else Warnings(),
        v1=V1Pacing(poll_interval=0.05),
    )


def claim_routes(server: CtrlplaneStandIn, suffix: str) -> list[str]:
    return [p for m, p, _ in server.requests() if m == "POST" and p.endswith(suffix)]


def test_every_job_shape_ctrlplane_sends_is_read(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent("gone-soon")
    queued = ctrlplane.seed_job(agent, dispatch_context={"v": 1})
    done = ctrlplane.seed_job(agent, "successful", message="ok", external_id="run-1")
    with client_for(ctrlplane) as client:
        client.delete_agent(UUID(agent))  # ctrlplane keeps the jobs: jobAgentId becomes ""
        page = client.list_jobs()
        by_id = {str(job.id): job for job in page.items}
        assert set(by_id) == {queued, done}
        assert by_id[queued].job_agent_id == "" and by_id[queued].agent_id is None
        assert by_id[done].message == "ok" and by_id[done].external_id == "run-1"
        job = client.get_job(UUID(done))
        assert job.release_id  # a field ctrlplane sends and the models keep
        assert job.updated_at is not None and job.completed_at is None
        # What the server left out stays unset: -o json will not print it as null.
        dumped = job.model_dump(by_alias=True, exclude_unset=True)
        assert dumped["releaseId"] == job.release_id
        assert "startedAt" not in dumped and "dispatchContext" not in dumped


def test_claim_next_falls_back_to_v1_oldest_first(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    oldest, middle, _newest = (ctrlplane.seed_job(agent) for _ in range(3))
    warnings = Warnings()
    with client_for(ctrlplane, warnings) as client:
        first = client.claim_next(UUID(agent), lease_seconds=60, wait_seconds=0)
        second = client.claim_next(UUID(agent), lease_seconds=60, wait_seconds=0)
    assert [str(first.id), str(second.id)] == [oldest, middle]
    assert first.claim_id is None and first.lease_seconds is None
    assert first.status == JobStatus.IN_PROGRESS
    assert ctrlplane.job(oldest).status == "in_progress"
    # claim-next was tried once; the process remembers the server is V1-only.
    assert len(claim_routes(ctrlplane, f"/job-agents/{agent}/claim")) == 1
    assert len(warnings) == 1 and "no lease support" in warnings[0]
    with client_for(ctrlplane, warnings) as other:  # another client of the same process
        other.claim_next(UUID(agent), lease_seconds=60, wait_seconds=0)
    assert len(claim_routes(ctrlplane, f"/job-agents/{agent}/claim")) == 1
    assert len(warnings) == 1


def test_v1_claim_moves_on_when_another_agent_wins(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    raced, spare = ctrlplane.seed_job(agent), ctrlplane.seed_job(agent)

    def another_agent_claims_first(request: Request) -> None:
        if request.path.endswith(f"/jobs/{raced}/claim"):
            ctrlplane.state.jobs[raced].status = "in_progress"

    ctrlplane.before = another_agent_claims_first
    with client_for(ctrlplane) as client:
        claimed = client.claim_next(UUID(agent), lease_seconds=None, wait_seconds=0)
    assert str(claimed.id) == spare
    assert len(claim_routes(ctrlplane, f"/jobs/{raced}/claim")) == 1  # 409, then the next


def test_v1_claim_polls_until_a_job_is_queued(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    seeded: list[str] = []
    polls = 0

    def queue_after_two_empty_polls(request: Request) -> None:
        nonlocal polls
        if request.method == "get" and request.path.endswith(f"/job-agents/{agent}/jobs"):
            polls += 1
            if polls == 3:
                seeded.append(ctrlplane.seed_job(agent))

    ctrlplane.before = queue_after_two_empty_polls
    with client_for(ctrlplane) as client:
        claimed = client.claim_next(UUID(agent), lease_seconds=None, wait_seconds=120)
    assert [str(claimed.id)] == seeded
    assert polls == 3


def test_v1_claim_gives_up_when_the_wait_runs_out(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    with client_for(ctrlplane) as client, pytest.raises(errors.NoJob):
        client.claim_next(UUID(agent), lease_seconds=None, wait_seconds=0.3)
    lists = [p for m, p, q in ctrlplane.requests() if m == "GET" and p.endswith("/jobs")]
    assert len(lists) >= 2  # it polled, not a single look


def test_ctrlplane_409_is_not_claimable_and_404_is_not_found(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    running = ctrlplane.seed_job(agent, "in_progress")
    no_release = ctrlplane.seed_job(agent, release=False)
    with client_for(ctrlplane) as client:
        with pytest.raises(errors.NotClaimable, match="not available to claim"):
            client.claim_job(UUID(agent), UUID(running), lease_seconds=60)
        with pytest.raises(errors.NotFound):
            client.update_status(UUID(no_release), JobStatus.SUCCESSFUL)
        with pytest.raises(errors.LeaseUnsupported):
            client.heartbeat(UUID(running), claim_id=None)


def test_workspace_slug_is_resolved_once_per_process(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    with client_for(ctrlplane, workspace=ctrlplane.workspace_slug) as client:
        assert client.workspace_id() == UUID(ctrlplane.workspace_id)
        assert [str(a.id) for a in client.list_agents().items] == [agent]
    with client_for(ctrlplane, workspace=ctrlplane.workspace_slug) as again:
        again.get_agent(UUID(agent))
    slug_lookups = [p for _, p, _ in ctrlplane.requests() if "/workspaces/slug/" in p]
    assert slug_lookups == [f"/v1/workspaces/slug/{ctrlplane.workspace_slug}"]
    with (
        client_for(ctrlplane, workspace="no-such-slug") as client,
        pytest.raises(errors.NotFound, match="no workspace with slug 'no-such-slug'"),
    ):
        client.list_agents()


def test_jobs_status_filter_is_applied_here_when_refused(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    failed = [ctrlplane.seed_job(agent, "failure") for _ in range(5)]
    for _ in range(3):
        ctrlplane.seed_job(agent, "successful")
    with client_for(ctrlplane) as client:
        page = client.list_jobs(status="failure", limit=2, offset=2)
        assert (page.total, page.limit, page.offset) == (5, 2, 2)
        assert [str(j.id) for j in page.items] == failed[::-1][2:4]  # newest first
        assert client.list_jobs(status="successful").total == 3
    sent_status = [q for m, p, q in ctrlplane.requests() if p.endswith("/jobs") and "status" in q]
    assert len(sent_status) == 1  # refused once (400), then never sent again


def test_what_the_status_endpoint_did_not_store_is_said_once(
    ctrlplane: CtrlplaneStandIn,
) -> None:
    agent = ctrlplane.add_agent()
    jobs = [ctrlplane.seed_job(agent, "in_progress") for _ in range(2)]
    warnings = Warnings()
    with client_for(ctrlplane, warnings) as client:
        for job in jobs:
            client.update_status(
                UUID(job),
                JobStatus.FAILURE,
                message="exit code 3",
                external_id="ci-7",
                metadata={"ctrlplane/links": "{}"},
            )
        client.update_status(UUID(jobs[0]), JobStatus.QUEUED)  # nothing extra: nothing to say
    assert ctrlplane.job(jobs[1]).status == "failure"
    assert len(warnings) == 1
    assert "did not store the message, external id, metadata (links)" in warnings[0]


def test_claims_by_many_threads_hand_each_job_once(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    seeded = {ctrlplane.seed_job(agent) for _ in range(6)}
    got: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        with client_for(ctrlplane) as client:
            while True:
                try:
                    job = client.claim_next(UUID(agent), lease_seconds=None, wait_seconds=0)
                except errors.NoJob:
                    return
                with lock:
                    got.append(str(job.id))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == sorted(seeded)
