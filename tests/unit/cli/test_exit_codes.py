"""Exit codes of SPEC §7: every error class has one, decided in one place inside the app."""

from __future__ import annotations

import inspect
import json

import pytest
from typer.testing import CliRunner

from jobagentctl import errors
from jobagentctl.cli.app import app
from jobagentctl.client import Client
from tests.fixtures.wire import API_KEY, BASE, JOB, WORKSPACE

# The SPEC §7 decision for each class. A new class in jobagentctl.errors fails the walk below
# until it is given a code here (and in the README's table).
EXPECTED = {
    "JobAgentError": 1,
    "UsageError": 2,
    "ConfigError": 2,
    "SchemaTooNew": 2,
    "ValidationError": 2,
    "PayloadTooLarge": 2,
    "ServerUnavailable": 3,
    "TlsError": 3,
    "AuthError": 4,
    "NotFound": 5,
    "Conflict": 6,
    "NotClaimable": 6,
    "ClaimLost": 6,
    "ClaimMismatch": 6,
    "JobTerminal": 6,
    "StuckClaims": 6,
    "NoJob": 7,
    "ServerError": 1,
    "ProtocolError": 1,
    "LeaseUnsupported": 1,
    "LogNotFound": 5,
    "LogExpired": 5,
    "LogsUnsupported": 1,
    "AttemptFailed": 8,
    "CommandOutcome": 1,
}

ERROR_CLASSES = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, errors.JobAgentError)
]


def test_every_error_class_is_known() -> None:
    assert {cls.__name__ for cls in ERROR_CLASSES} == set(EXPECTED)


def test_command_outcomes_are_a_branch_apart_from_wire_errors() -> None:
    """No job to claim, stuck claims and a failed attempt are results a script branches on.
    They sit under ``CommandOutcome``, not under a wire error (``StuckClaims`` is no 409).
    No wire code turns into one. A server without logs is not a server without leases."""
    outcomes = {cls.__name__ for cls in ERROR_CLASSES if issubclass(cls, errors.CommandOutcome)}
    assert outcomes == {"CommandOutcome", "NoJob", "StuckClaims", "AttemptFailed"}
    for name in outcomes - {"CommandOutcome"}:
        cls = getattr(errors, name)
        assert cls.__bases__ == (errors.CommandOutcome,)
        assert errors.error_for_code(cls.code, 500) is errors.ServerError
    assert not issubclass(errors.LogsUnsupported, errors.LeaseUnsupported)
    assert errors.LogsUnsupported.__bases__ == (errors.ProtocolError,)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_has_its_code(cls: type[errors.JobAgentError]) -> None:
    assert errors.exit_code_for(cls("x")) == EXPECTED[cls.__name__]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_the_app_exits_with_the_code(
    cls: type[errors.JobAgentError], monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self: Client, job_id: object) -> None:
        raise cls("it broke", details={"jobStatus": "cancelled"})

    monkeypatch.setattr(Client, "get_job", boom)
    env = {
        "JOBAGENTCTL_URL": BASE,
        "JOBAGENTCTL_API_KEY": API_KEY,
        "JOBAGENTCTL_WORKSPACE": str(WORKSPACE),
    }
    result = CliRunner().invoke(app, ["-o", "json", "jobs", "get", str(JOB)], env=env)
    code = EXPECTED[cls.__name__]
    assert result.exit_code == code
    assert result.stdout == ""
    human, line = result.stderr.strip().splitlines()
    assert human == "error: it broke"
    body = json.loads(line)["error"]
    assert body["code"] == cls.code
    assert body["exitCode"] == code
    assert body["message"] == "it broke"
    assert body["details"] == {"jobStatus": "cancelled"}


def test_unexpected_exception_is_exit_1_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: Client, job_id: object) -> None:
        raise KeyError("surprise")

    monkeypatch.setattr(Client, "get_job", boom)
    env = {
        "JOBAGENTCTL_URL": BASE,
        "JOBAGENTCTL_API_KEY": API_KEY,
        "JOBAGENTCTL_WORKSPACE": str(WORKSPACE),
    }
    result = CliRunner().invoke(app, ["jobs", "get", str(JOB)], env=env)
    assert result.exit_code == 1
    assert "unexpected KeyError" in result.stderr
    assert "--debug" in result.stderr
    assert "Traceback" not in result.stderr
    result = CliRunner().invoke(app, ["--debug", "jobs", "get", str(JOB)], env=env)
    assert result.exit_code == 1
    assert "Traceback" in result.stderr


def test_ctrl_c_is_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: Client, job_id: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Client, "get_job", interrupted)
    env = {
        "JOBAGENTCTL_URL": BASE,
        "JOBAGENTCTL_API_KEY": API_KEY,
        "JOBAGENTCTL_WORKSPACE": str(WORKSPACE),
    }
    assert CliRunner().invoke(app, ["jobs", "get", str(JOB)], env=env).exit_code == 130


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["list", "--limit", "0"],
        ["list", "--bogus"],
        ["-o", "yaml", "list"],
        ["--json", "-o", "tsv", "list"],
        ["claim", "--wait", "soon"],
        ["inspect-claims", "--stale-after", "-1"],
        ["complete"],
    ],
)
def test_usage_errors_are_2(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""


def test_json_error_status_is_what_a_server_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status` is the HTTP status a server sent; null when none answered (README: errors)."""
    import socket

    with socket.socket() as sock:  # bound, never listening: the connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        env = {
            "JOBAGENTCTL_URL": f"http://127.0.0.1:{port}",
            "JOBAGENTCTL_API_KEY": API_KEY,
            "JOBAGENTCTL_WORKSPACE": str(WORKSPACE),
        }
        refused = CliRunner().invoke(app, ["jobs", "get", str(JOB), "--json"], env=env)
    assert refused.exit_code == 3
    error = json.loads(refused.stderr.splitlines()[-1])["error"]
    assert (error["code"], error["status"]) == ("SERVICE_UNAVAILABLE", None)

    def answered(self: Client, job_id: object) -> None:
        raise errors.ServerUnavailable("busy", status=503)

    monkeypatch.setattr(Client, "get_job", answered)
    env["JOBAGENTCTL_URL"] = BASE
    busy = CliRunner().invoke(app, ["jobs", "get", str(JOB), "--json"], env=env)
    assert busy.exit_code == 3
    assert json.loads(busy.stderr.splitlines()[-1])["error"]["status"] == 503
