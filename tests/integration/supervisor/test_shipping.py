"""Shipping through a whole `run` (real child processes, a scripted client): a server without
logs is told once and asked again each job, a server upgraded under a loop gets the next job's
output, and `--no-ship-output` ships nothing."""

from __future__ import annotations

from pathlib import Path

from jobagentctl.errors import LogsUnsupported
from tests.fixtures.fake_client import FakeClient, claimed_job
from tests.fixtures.supervisor import options, run


def test_run_says_once_when_the_server_has_no_logs_and_asks_again_each_job(
    tmp_path: Path,
) -> None:
    jobs = [claimed_job(), claimed_job(), claimed_job()]

    def no_logs(n: int) -> None:
        raise LogsUnsupported("the server has no log support (POST …/logs answered 404)")

    client = FakeClient(jobs=list(jobs), on_append=no_logs)
    opts = options(tmp_path, ["sh", "-c", "echo hello"], loop=True, max_jobs=3, wait=0.0)
    code, logs, records = run(client, opts)
    assert code == 0
    assert [r["status"] for r in records] == ["successful"] * 3
    # Said once (the later jobs' findings are debug lines).
    assert sum(line.startswith("the server has no log support") for line in logs) == 1
    # Each job asks again (the client forgets what it learned), none ships.
    assert len(client.named("append_logs")) == 3
    assert len(client.named("recheck_logs")) == 2
    assert client.appended == []


def test_a_server_upgraded_under_a_loop_gets_the_next_jobs_output(tmp_path: Path) -> None:
    # The first job finds no log endpoint; the server is upgraded; the next jobs ship.
    jobs = [claimed_job(), claimed_job(), claimed_job()]

    def old_server_first(n: int) -> None:
        if n == 1:
            raise LogsUnsupported("the server has no log support (POST …/logs answered 404)")

    client = FakeClient(jobs=list(jobs), on_append=old_server_first)
    opts = options(tmp_path, ["sh", "-c", "echo hello"], loop=True, max_jobs=3, wait=0.0)
    code, logs, _ = run(client, opts)
    assert code == 0
    assert client.shipped() == [("stdout", b"hello\n")] * 2
    assert sum("no log support" in line for line in logs) == 1
    assert sum("keeps job logs now" in line for line in logs) == 1


def test_no_ship_output_ships_nothing(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, _ = run(client, options(tmp_path, ["sh", "-c", "echo hi"], ship_output=False))
    assert code == 0
    assert client.named("append_logs") == []
