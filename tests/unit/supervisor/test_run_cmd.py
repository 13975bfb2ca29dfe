"""`jobagentctl run` on the command line: flags are usage errors (2), set-up failures 125."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from jobagentctl.cli.app import app
from jobagentctl.cli.run_cmd import parse_signal
from jobagentctl.errors import UsageError

KEY = "jac_abcdefabcdef.secret-that-must-not-leak"
ENV = {
    # Port 9 (discard): nothing listens; no test here may get as far as a request.
    "JOBAGENTCTL_URL": "http://127.0.0.1:9",
    "JOBAGENTCTL_API_KEY": KEY,
    "JOBAGENTCTL_WORKSPACE": str(uuid.uuid4()),
    "JOBAGENTCTL_AGENT": str(uuid.uuid4()),
}


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    result = CliRunner().invoke(app, ["run", *args], env={**ENV, **(env or {})})
    assert KEY not in result.stdout + result.stderr
    return result


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "soon", "--", "true"], "invalid --timeout"),
        (["--grace", "-1", "--", "true"], "--grace"),
        (["--stop-signal", "NOPE", "--", "true"], "unknown signal"),
        (["--on-lease-lost", "maybe", "--", "true"], "--on-lease-lost"),
        (["--job", str(uuid.uuid4()), "--loop", "--", "true"], "cannot be combined"),
        (["--job", "not-a-uuid", "--", "true"], "not a UUID"),
        (["--max-jobs", "3", "--", "true"], "need --loop"),
        (["--lease-seconds", "-1", "--", "true"], "--lease-seconds"),
        (["--no-output-timeout", "soon", "--", "true"], "invalid --no-output-timeout"),
        (["--no-output-timeout", "5s", "--no-capture", "--", "true"], "needs capture"),
        (["--redact", " ", "--", "true"], "--redact"),
        ([], "missing CMD"),
    ],
)
def test_bad_flags_are_usage_errors(args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("JOBAGENTCTL_URL", "no server URL"),
        ("JOBAGENTCTL_WORKSPACE", "no workspace"),
        ("JOBAGENTCTL_AGENT", "no job agent"),
        ("JOBAGENTCTL_API_KEY", "API key"),
    ],
)
def test_missing_settings_fail_with_125_before_anything_runs(
    missing: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("--", "touch", "ran", env={missing: None})
    assert result.exit_code == 125, result.stderr
    assert message in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "ran").exists()


def test_a_server_that_is_down_at_claim_time_is_125() -> None:
    result = invoke("--", "true")
    assert result.exit_code == 125
    assert "cannot claim a job" in result.stderr


def test_options_after_the_command_belong_to_it() -> None:
    # Without `--`, `--timeout` after CMD is CMD's argument, not ours: no usage error.
    result = invoke("echo", "--timeout", "soon")
    assert result.exit_code == 125  # got as far as claiming (server down), so it parsed


@pytest.mark.parametrize(
    ("text", "expected"),
    [("TERM", signal.SIGTERM), ("sigint", signal.SIGINT), ("9", signal.SIGKILL)],
)
def test_parse_signal(text: str, expected: signal.Signals) -> None:
    assert parse_signal(text) == expected


def test_parse_signal_rejects_unknown_names() -> None:
    with pytest.raises(UsageError):
        parse_signal("SIGWHATEVER")
