"""`run --report PATH` is opened before anything is claimed.

An unwritable path noticed only after the job ran would give exit 7 or the command's own code
and no verdict to read; a record left by an earlier run could be read as this run's if the file
were only rewritten at the end. So: 125 before claiming, and the file emptied at start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobagentctl.cli.app import app
from tests.fixtures.fake_client import FakeClient, claimed_job
from tests.fixtures.supervisor import options, run
from tests.unit.supervisor.test_run_cmd import ENV, KEY

STALE = json.dumps({"verdict": "completed", "jobId": "earlier", "exitCode": 0}) + "\n"


def _unwritable(tmp_path: Path) -> Path:
    return tmp_path / "no-such-dir" / "report.json"


@pytest.mark.parametrize("loop", [False, True])
def test_an_unwritable_report_fails_with_125_before_claiming(tmp_path: Path, loop: bool) -> None:
    client = FakeClient(jobs=[claimed_job()])
    opts = options(tmp_path, ["true"], report_path=_unwritable(tmp_path), loop=loop)
    code, logs, _ = run(client, opts)
    assert code == 125
    assert not client.calls, "nothing is claimed"
    (line,) = [m for m in logs if "--report" in m]
    assert "cannot write --report" in line and "No such file or directory" in line
    assert "nothing was claimed" in line


def test_a_stale_report_is_emptied_before_the_command_runs(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(STALE)
    # The command sees an empty report: a run killed now would leave no verdict, not a stale one.
    client = FakeClient(jobs=[claimed_job()])
    script = f'test ! -s "{report}"'
    code, _, _ = run(client, options(tmp_path, ["sh", "-c", script], report_path=report))
    assert code == 0, "the report was not emptied before the command ran"
    (line,) = report.read_text().splitlines()
    assert json.loads(line)["verdict"] == "completed"
    assert json.loads(line)["jobId"] != "earlier"


def test_with_loop_earlier_records_are_kept(tmp_path: Path) -> None:
    report = tmp_path / "runs.jsonl"
    report.write_text(STALE)
    client = FakeClient(jobs=[claimed_job()])
    code, _, _ = run(client, options(tmp_path, ["true"], report_path=report, loop=True, max_jobs=1))
    assert code == 0
    first, second = report.read_text().splitlines()
    assert first == STALE.strip()
    assert json.loads(second)["verdict"] == "completed"


def test_a_report_nobody_may_write_is_125_on_the_command_line(tmp_path: Path) -> None:
    """Through the CLI: the server is down (port 9), but the report is refused first."""
    if os.geteuid() == 0:
        report = _unwritable(tmp_path)  # root writes anywhere: a missing directory instead
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        report = locked / "report.json"
    result = CliRunner().invoke(app, ["run", "--report", str(report), "--", "true"], env=dict(ENV))
    assert result.exit_code == 125, result.stderr
    assert f"cannot write --report {report}" in result.stderr
    assert "cannot claim" not in result.stderr, "refused before any request"
    assert KEY not in result.stdout + result.stderr


def test_set_up_failures_use_the_apps_error_reporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run`'s own failures before the command starts go through the app's reporter: the text
    made terminal-safe, the JSON error line with exitCode 125."""
    monkeypatch.chdir(tmp_path)
    key_file = tmp_path / "key\x1b]0;owned\x07"
    result = CliRunner().invoke(
        app,
        ["-o", "json", "run", "--report", "r.json", "--", "true"],
        env={**ENV, "JOBAGENTCTL_API_KEY": None, "JOBAGENTCTL_API_KEY_FILE": str(key_file)},
    )
    assert result.exit_code == 125, result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "cannot read the API key file" in result.stderr
    (error,) = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert error["error"]["exitCode"] == 125
    assert error["error"]["code"] == "CONFIG_ERROR"
    assert error["error"]["status"] is None
    # Without --loop the report still gets its one record: the failed verdict.
    (line,) = (tmp_path / "r.json").read_text().splitlines()
    assert json.loads(line)["verdict"] == "failed"
