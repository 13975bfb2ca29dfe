"""A fleet through the gateway: two gateway replicas on one database, two agents with two
`run --loop` processes each, spread over the replicas; every job ctrlplane has runs exactly
once and ends successful there. Both databases."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

from tests.fixtures.cli import cli_command
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.live_server import LiveServer
from tests.fixtures.waiting import wait_until
from tests.system.gateway.conftest import GatewayFactory

JOBS_PER_AGENT = 8


def _loop(gateway: LiveServer, agent: str, ran: Path) -> subprocess.Popen[bytes]:
    script = f'echo "$JOBAGENTCTL_JOB_ID $JOBAGENTCTL_ATTEMPT" >> {ran}'
    return subprocess.Popen(
        cli_command(
            "run",
            "--loop",
            "--idle-timeout",
            "6s",
            "--lease-seconds",
            "10",
            "--",
            "sh",
            "-c",
            script,
        ),
        env={**gateway.base_env(), **gateway.env(), "JOBAGENTCTL_AGENT": agent},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def test_every_job_runs_exactly_once(
    gateway_factory: GatewayFactory, ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    first = gateway_factory().start()
    replica = first.replica()  # the same database, workspace and key
    agents = [ctrlplane.add_agent(f"pull-{n}") for n in range(2)]
    jobs = [ctrlplane.seed_job(agent) for agent in agents for _ in range(JOBS_PER_AGENT)]
    ran = tmp_path / "ran.txt"
    procs = [_loop(server, agent, ran) for agent in agents for server in (first, replica)]
    try:
        try:
            wait_until(
                lambda: all(ctrlplane.job(job).status == "successful" for job in jobs),
                what="every job successful in ctrlplane",
                timeout=60,
            )
        except AssertionError:
            # What the failure needs: ctrlplane's statuses, the gateways' and agents' logs.
            print(Counter(ctrlplane.job(job).status for job in jobs))
            print(first.log()[-3000:], replica.log()[-3000:])
            for proc in procs:
                proc.kill()
                print(proc.stderr.read().decode()[-1500:] if proc.stderr else "")
            raise
        for proc in procs:
            assert proc.wait(120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    runs = Counter(line.split()[0] for line in ran.read_text().splitlines())
    assert set(runs) == set(jobs)
    assert all(count == 1 for count in runs.values()), runs
