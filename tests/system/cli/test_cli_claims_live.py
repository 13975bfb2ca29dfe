"""inspect-claims against a real server: expired, unleased and stale claims, reaped leases."""

from __future__ import annotations

import json

from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.server_cli import jac, jac_process
from tests.fixtures.waiting import wait_until


def test_expired_and_unleased_claims_are_stuck(live_server_factory: LiveServerFactory) -> None:
    # A reaper that never runs during the test, so an expired claim stays visible as expired.
    server = live_server_factory(reap_interval=3600)
    agent = server.create_agent("stuck")
    leased = server.enqueue(agent)
    v1 = server.enqueue(agent)

    claim = jac(server, "claim", leased["id"], "--lease-seconds", "1", "--json", agent=agent)
    assert claim.returncode == 0, claim.stderr
    assert json.loads(claim.stdout)["leaseSeconds"] == 1
    unleased = jac(server, "claim", v1["id"], "--lease-seconds", "0", "-o", "env", agent=agent)
    assert unleased.returncode == 0, unleased.stderr
    assert "export JOBAGENTCTL_CLAIM_ID=''" in unleased.stdout.splitlines()
    assert unleased.stderr == ""  # asked for no lease: no warning

    def states() -> dict[str, str]:
        proc = jac(server, "inspect-claims", "--json")
        assert proc.returncode == 0, proc.stderr
        return {c["jobId"]: c["state"] for c in json.loads(proc.stdout)}

    seen = wait_until(
        lambda: (s := states()).get(leased["id"]) == "expired" and s, what="the lease to lapse"
    )
    assert seen == {leased["id"]: "expired", v1["id"]: "unleased"}

    tsv = jac(server, "inspect-claims", "--state", "expired")
    assert [line.split("\t")[:2] for line in tsv.stdout.splitlines()] == [[leased["id"], "expired"]]
    stuck = jac_process(server, "inspect-claims", "--fail-if-stuck")
    assert stuck.returncode == 6
    assert "stuck claim" in stuck.stderr
    assert len(stuck.stdout.splitlines()) == 2

    # The V1 claim's empty claim id counts as unset: the heartbeat goes unfenced and the server
    # says the job holds no claim to extend.
    beat = jac(
        server,
        "heartbeat",
        env={"JOBAGENTCTL_JOB_ID": v1["id"], "JOBAGENTCTL_CLAIM_ID": ""},
    )
    assert beat.returncode == 6, beat.stderr
    assert "error:" in beat.stderr


def test_reaped_claim_is_lost_and_stale_claims_fail(live_server: LiveServer) -> None:
    agent = live_server.create_agent("reaped")
    job = live_server.enqueue(agent)
    claim = jac(live_server, "claim", "--lease-seconds", "1", "-o", "env", agent=agent)
    assert claim.returncode == 0, claim.stderr
    ids = dict(line.removeprefix("export ").split("=", 1) for line in claim.stdout.splitlines())
    # The fast reaper returns the job to the queue after its 1 s lease.
    wait_until(
        lambda: live_server.get_job(job["id"])["status"] == "queued", what="the reaper to requeue"
    )
    lost = jac(live_server, "heartbeat", env=ids)
    assert lost.returncode == 6
    assert "error:" in lost.stderr
    late = jac(live_server, "complete", "--exit-code", "0", env=ids)
    assert late.returncode == 6

    # A live claim whose heartbeats stopped a while ago is "stale" for an operator.
    again = jac(live_server, "claim", job["id"], "--lease-seconds", "600", agent=agent)
    assert again.returncode == 0, again.stderr

    def stale() -> bool:
        proc = jac(live_server, "inspect-claims", "--stale-after", "1s", "--fail-if-stuck")
        return proc.returncode == 6 and "\tstale\t" in proc.stdout

    wait_until(stale, what="the claim to be marked stale")
    fresh = jac(live_server, "inspect-claims", "--stale-after", "1h", "--fail-if-stuck")
    assert fresh.returncode == 0, fresh.stderr
