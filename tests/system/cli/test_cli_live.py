"""The CLI against a real server (SQLite and PostgreSQL): a bash agent, exit codes, operators."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.cli import run_bash
from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_cli import env_for, jac, jac_process

AGENT_SCRIPT = r"""
set -euo pipefail

claim=$(jobagentctl claim --wait 10s -o env)
eval "$claim"
test -n "$JOBAGENTCTL_CLAIM_ID"
echo "claimed $JOBAGENTCTL_JOB_ID attempt $JOBAGENTCTL_ATTEMPT lease $JOBAGENTCTL_LEASE_SECONDS" >&2

# The work, with heartbeats from the shell while it runs.
for step in 1 2; do
  jobagentctl heartbeat >/dev/null
done
jobagentctl jobs get "$JOBAGENTCTL_JOB_ID" -o json > job.json

jobagentctl complete --exit-code 0 --message built --link "Logs=https://ci.example.com/1" >/dev/null
# A retry of the same report (same claim id) is a safe no-op.
jobagentctl complete --exit-code 0 --message built >/dev/null
echo "$JOBAGENTCTL_JOB_ID"
"""


def test_bash_agent_claims_heartbeats_and_completes(
    live_server: LiveServer, tmp_path: Path
) -> None:
    agent = live_server.create_agent("bash-agent")
    job = live_server.enqueue(agent, job_agent_config={"script": "make"})
    proc = run_bash(AGENT_SCRIPT, env=env_for(live_server, agent), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == job["id"]
    assert f"claimed {job['id']} attempt 1 lease 60" in proc.stderr
    assert json.loads((tmp_path / "job.json").read_text())["jobAgentConfig"] == {"script": "make"}

    final = live_server.get_job(job["id"])
    assert final["status"] == "successful"
    assert final["message"] == "built"
    assert json.loads(final["metadata"]["ctrlplane/links"]) == {"Logs": "https://ci.example.com/1"}
    attempts = jac(live_server, "jobs", "attempts", job["id"], "--json")
    assert [(a["attempt"], a["outcome"]) for a in json.loads(attempts.stdout)] == [(1, "completed")]
    # Nothing left to claim: exit 7, nothing on stdout.
    empty = jac(live_server, "claim", agent=agent)
    assert (empty.returncode, empty.stdout) == (7, "")


def test_operator_commands_and_exit_codes(live_server: LiveServer) -> None:
    registered = jac(
        live_server, "agents", "register", "ops", "--config", '{"leaseSeconds": 30}', "--json"
    )
    assert registered.returncode == 0, registered.stderr
    agent = json.loads(registered.stdout)["id"]
    again = jac(live_server, "agents", "register", "ops", "--json")
    assert json.loads(again.stdout)["id"] == agent  # same name, same agent

    enqueued = jac(
        live_server,
        "jobs",
        "enqueue",
        "--config",
        '{"x": 1}',
        "--metadata",
        "team=ops",
        "--json",
        agent=agent,
    )
    assert enqueued.returncode == 0, enqueued.stderr
    job = json.loads(enqueued.stdout)
    listed = jac(live_server, "list", agent=agent)
    assert listed.stdout.split("\t")[0] == job["id"]

    # The CLI always asks for a lease (default 60): an explicit ask wins over the agent's config.
    claimed = jac(live_server, "claim", "--json", "--lease-seconds", "45", agent=agent)
    assert json.loads(claimed.stdout)["leaseSeconds"] == 45
    assert jac(live_server, "requeue", job["id"]).returncode == 0
    assert live_server.get_job(job["id"])["status"] == "queued"
    assert jac(live_server, "cancel", job["id"], "-m", "no longer needed").returncode == 0
    assert live_server.get_job(job["id"])["status"] == "cancelled"
    outcomes = json.loads(jac(live_server, "jobs", "attempts", job["id"], "--json").stdout)
    assert [a["outcome"] for a in outcomes] == ["released"]
    assert jac(live_server, "agents", "delete", agent).returncode == 0

    # Exit codes for real: a real server, and real processes where a shell's view matters.
    agent = live_server.create_agent("codes")
    # 7: nothing queued.
    assert jac_process(live_server, "claim", agent=agent).returncode == 7
    # 4: a key the server does not know; also a missing key (before any request).
    bad = jac_process(
        live_server, "list", agent=agent, env={"JOBAGENTCTL_API_KEY": "jak_nope.wrong"}
    )
    assert bad.returncode == 4, bad.stderr
    assert "jak_nope.wrong" not in bad.stderr
    no_key = jac(live_server, "list", agent=agent, env={"JOBAGENTCTL_API_KEY": ""})
    assert no_key.returncode == 4
    # 5: an unknown job.
    missing = jac(live_server, "jobs", "get", "00000000-0000-4000-8000-000000000000")
    assert missing.returncode == 5
    # 2: bad flag, bad duration.
    assert jac(live_server, "list", "--limit", "0", agent=agent).returncode == 2
    assert jac(live_server, "claim", "--wait", "5 minutes", agent=agent).returncode == 2
    # 6: claiming a job that is not queued.
    job = live_server.enqueue(agent)
    assert jac(live_server, "claim", job["id"], agent=agent).returncode == 0
    taken = jac(live_server, "claim", job["id"], "--json", agent=agent)
    assert taken.returncode == 6
    assert json.loads(taken.stderr.splitlines()[-1])["error"]["code"] == "NOT_CLAIMABLE"
    # 3: the server is down.
    live_server.stop()
    down = jac_process(live_server, "list", agent=agent)
    assert down.returncode == 3
    assert "cannot reach the server" in down.stderr
