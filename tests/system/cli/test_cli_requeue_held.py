"""`requeue` / `cancel` of a job whose claim an agent still holds say so on stderr (when the
job becomes claimable, and that `requeue --force` skips the wait), and `jobs get` shows
`claimHeld` in every format; against a real server on both databases (the held claim is
read with each dialect's SQL)."""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_cli import jac


def _claimed(server: LiveServer, agent: str) -> dict[str, Any]:
    job = server.enqueue(agent)
    status, claimed = server.request(
        "POST", f"job-agents/{agent}/jobs/{job['id']}/claim", {"leaseSeconds": 600}
    )
    assert status == 200, claimed
    found: dict[str, Any] = claimed
    return found


def _claim_held_everywhere(server: LiveServer, job_id: str) -> set[str]:
    """What each format of `jobs get` says about claimHeld."""
    said = set()
    tsv = jac(server, "jobs", "get", job_id, "-o", "tsv")
    assert tsv.returncode == 0, tsv.stderr
    said.add(tsv.stdout.rstrip("\n").split("\t")[-1])
    got = jac(server, "jobs", "get", job_id, "-o", "json")
    # JSON is the object as the server sent it: claimHeld only when true (absent: false).
    said.add(json.dumps(json.loads(got.stdout).get("claimHeld", False)))
    env = jac(server, "jobs", "get", job_id, "-o", "env")
    assert env.returncode == 0, env.stderr
    said.add(next(v for v in env.stdout.splitlines() if "CLAIM_HELD" in v).split("=")[1])
    table = jac(server, "jobs", "get", job_id, "-o", "table")
    row = next(line for line in table.stdout.splitlines() if "claim held" in line)
    said.add({"yes": "true", "no": "false"}[row.split()[-1]])
    return said


def test_requeue_and_cancel_of_a_held_claim_say_what_they_wait_for(
    live_server: LiveServer,
) -> None:
    agent = live_server.create_agent("holder")
    job = _claimed(live_server, agent)
    assert _claim_held_everywhere(live_server, job["id"]) == {"true"}  # its running attempt

    ran = jac(live_server, "requeue", job["id"])
    assert ran.returncode == 0, ran.stderr
    assert f"job {job['id']} is queued but not claimable until its agent lets go" in ran.stderr
    assert "or its lease ends at 20" in ran.stderr
    assert f"`jobagentctl requeue --force {job['id']}` skips the wait" in ran.stderr
    assert _claim_held_everywhere(live_server, job["id"]) == {"true"}  # revoked, not let go

    forced = jac(live_server, "requeue", "--force", job["id"])
    assert forced.returncode == 0, forced.stderr
    assert "not claimable" not in forced.stderr
    assert _claim_held_everywhere(live_server, job["id"]) == {"false"}
    # Nothing held: nothing said.
    again = jac(live_server, "requeue", job["id"])
    assert (again.returncode, again.stderr) == (0, "")

    other = _claimed(live_server, agent)
    cancelled = jac(live_server, "cancel", other["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"job {other['id']} is cancelled; its agent holds the claim until" in cancelled.stderr
