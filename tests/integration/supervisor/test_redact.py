"""Redaction: the redactor's own answers, and one known answer per source of secrets through a
whole `run` (real child, scripted client): the secret reaches the failure message and the
``--report`` record as ``[REDACTED]`` while our own stdout keeps it."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from jobagentctl.cli.app import app
from jobagentctl.models import REDACT_SOCKET_ENV, RUN_PID_ENV, ClaimedJob
from jobagentctl.supervisor import Log
from jobagentctl.supervisor.output.redact import (
    DEFAULT_PATTERNS,
    Redactor,
    name_matches,
    secret_parts,
    secrets_from_context,
    secrets_from_environment,
)
from jobagentctl.supervisor.process.handover import ADDED, HandoverSocket, hand_over
from jobagentctl.supervisor.process.jobfiles import sweep_stale_job_files
from tests.fixtures.fake_client import FakeClient, claimed_job
from tests.fixtures.processes import IMPOSTOR
from tests.fixtures.supervisor import options, reports, run, sh

# --- the redactor ---------------------------------------------------------------------------


def test_values_shorter_than_six_characters_are_not_redacted() -> None:
    redactor = Redactor(["12345", "€€€€€", "123456", "€€€€€€"])
    assert redactor.count == 2
    assert redactor.redact("12345 123456 €€€€€€".encode()) == b"12345 [REDACTED] [REDACTED]"


def test_a_secret_split_across_chunks_and_streams_is_one_marker() -> None:
    redactor = Redactor(["hunter2-pässword"])
    out = redactor.feed("stdout", b"login hun")
    out += redactor.feed("stderr", b"ter2-p\xc3")
    out += redactor.feed("stdout", b"\xa4ssword done\n")
    out += redactor.flush()
    assert b"".join(chunk for _, chunk in out) == b"login [REDACTED] done\n"
    # The marker goes with the stream the secret began on.
    assert ("stdout", b"[REDACTED] done\n") in out


def test_it_holds_back_only_what_may_begin_a_secret() -> None:
    redactor = Redactor(["abcdefgh"])
    assert redactor.holdback == 7
    assert redactor.feed("stdout", b"xyz abc") == [("stdout", b"xyz ")]
    assert redactor.held == 3
    assert redactor.feed("stdout", b"x") == [("stdout", b"abcx")]
    assert redactor.held == 0
    # Nothing that could begin one: released at once.
    assert redactor.feed("stderr", b"plain") == [("stderr", b"plain")]


def test_the_longest_secret_wins_even_when_the_shorter_one_is_complete_first() -> None:
    redactor = Redactor(["abcdef", "abcdefghij"])
    out = redactor.feed("stdout", b"<abcdef")
    out += redactor.feed("stdout", b"ghij>")
    out += redactor.flush()
    assert b"".join(chunk for _, chunk in out) == b"<[REDACTED]>"


def test_a_value_added_from_another_thread_is_redacted_from_then_on() -> None:
    redactor = Redactor()
    fork = redactor.fork()
    assert redactor.feed("stdout", b"token-abc123 ") == [("stdout", b"token-abc123 ")]
    adder = threading.Thread(target=redactor.add, args=(b"token-abc123",))
    adder.start()
    adder.join()
    assert redactor.feed("stdout", b"token-abc123\n") == [("stdout", b"[REDACTED]\n")]
    assert fork.redact(b"token-abc123") == b"[REDACTED]"


def test_redact_text_keeps_undecodable_characters() -> None:
    redactor = Redactor(["s3cr3t-value"])
    assert redactor.redact_text("a\udcffb s3cr3t-value") == "a\udcffb [REDACTED]"


# --- where secrets come from ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("DB_PASSWORD", True),
        ("db_password", True),  # case-insensitive
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY", True),
        ("APP_SECRET", True),
        ("STRIPE_SECRET_KEY", True),
        ("OPENAI_API_KEY", True),
        ("PASSWORD", False),  # the patterns want a prefix, as buildkite-agent's
        ("TOKEN_PATH", False),
        ("HOME", False),
    ],
)
def test_default_name_patterns(name: str, secret: bool) -> None:
    assert name_matches(name, DEFAULT_PATTERNS) is secret


def test_environment_values_by_name() -> None:
    env = {"DB_PASSWORD": "pa55word!", "MY_CREDS": "creds-value", "HOME": "/home/someone"}
    assert list(secrets_from_environment(env, DEFAULT_PATTERNS)) == ["pa55word!"]
    found = secrets_from_environment(env, (*DEFAULT_PATTERNS, "*_creds"))
    assert sorted(found) == ["creds-value", "pa55word!"]


def test_dispatch_context_sensitive_values() -> None:
    context: dict[str, Any] = {
        "release": {
            "encryptedVariables": ["dbUrl"],
            "variables": {"dbUrl": "postgres://u:p@db/app", "region": "eu-west-1"},
        },
        # ctrlplane's dispatcher copies release.variables here.
        "variables": {"dbUrl": "postgres://u:p@db/app", "SLACK_TOKEN": "xoxb-12345678"},
        "resource": {
            "variables": {"hash": {"valueHash": "9f8e7d6c5b4a"}, "port": 5432},
            "config": {"vars": [{"key": "k", "value": {"n": 12345678}, "sensitive": True}]},
        },
        "workflowJob": {"inputs": [{"key": "pin", "value": "open-text", "isSensitive": False}]},
        "jobAgentConfig": {"nested": {"isSensitive": True, "value": "agent-config-secret"}},
    }
    found = set(secrets_from_context(context, DEFAULT_PATTERNS))
    # The URL's credentials come too (here too short to be redacted on their own).
    secrets = {"postgres://u:p@db/app", "xoxb-12345678", "12345678", "agent-config-secret"}
    assert found == {*secrets, "u:p", "p"}
    assert list(secrets_from_context(None, DEFAULT_PATTERNS)) == []


def test_url_credentials_in_any_variable_are_secrets() -> None:
    env = {
        "DATABASE_URL": "postgresql://app:s3cr%40t-pw@db:5432/app?sslmode=require",
        "MIRROR": "https://mirror.example/pub",  # no credentials: nothing
        "PIP_INDEX": "pip install -i https://ci:index-token@pypi.internal/simple pkg",
    }
    found = list(secrets_from_environment(env, DEFAULT_PATTERNS))
    assert found == [
        "app:s3cr%40t-pw",
        "s3cr%40t-pw",
        "s3cr@t-pw",
        "ci:index-token",
        "index-token",
        "index-token",
    ]


@pytest.mark.parametrize(
    ("secret", "parts"),
    [
        ("https://bot:tok-123456@git.example/r.git", {"bot:tok-123456", "tok-123456"}),
        ("robot$ci:registry-pw", {"registry-pw"}),
        ("Bearer eyJhbGciOi.payload.sig", {"eyJhbGciOi.payload.sig"}),
        # Basic credentials: the encoded pair, the pair, and the password.
        ("Basic ZGVwbG95OmJhc2ljLXB3", {"ZGVwbG95OmJhc2ljLXB3", "deploy:basic-pw", "basic-pw"}),
        (
            "Authorization: Basic ZGVwbG95OmJhc2ljLXB3",
            {"ZGVwbG95OmJhc2ljLXB3", "deploy:basic-pw", "basic-pw"},
        ),
        ("Basic not-base64!", {"not-base64!"}),
        ("plain-secret-value", set()),
        ("two words: not a pair", set()),
        (b"\xff\xfe:undecodable", set()),
    ],
)
def test_the_parts_of_a_composite_secret(secret: str | bytes, parts: set[str]) -> None:
    assert set(secret_parts(secret)) == parts


@pytest.mark.timeout(60)
def test_the_parts_of_a_long_value_are_found_in_one_pass() -> None:
    # A value of letters and digits, as a key or a token is: looking for a URL's scheme at
    # every offset must not scan to the end each time (a 1 MiB value took minutes).
    value = "a1" * (1 << 19) + " https://user:long-password@host"
    assert set(secret_parts(value)) == {"user:long-password", "long-password"}


def test_parts_are_redacted_with_the_whole_and_values_handed_over_too() -> None:
    redactor = Redactor(["postgres://app:db-pa55@db/app"])
    redactor.add(b"robot:handed-over-pw")  # as `redact add` gives it
    text = b"postgres://app:db-pa55@db/app db-pa55 app:db-pa55 handed-over-pw"
    assert redactor.redact(text) == b"[REDACTED] [REDACTED] [REDACTED] [REDACTED]"


# --- each source through a whole run ----------------------------------------------------------


def _failed_run(
    tmp_path: Path, script: str, *, job: ClaimedJob | None = None, **overrides: object
) -> tuple[str, dict[str, object]]:
    client = FakeClient(jobs=[job or claimed_job()])
    code, _, records = run(client, options(tmp_path, sh(script + "; exit 3"), **overrides))
    assert code == 3
    message = reports(client)[0][1]
    assert message is not None and message.startswith("exit code 3\n")
    assert records[0]["message"] == message
    return message, records[0]


def test_the_api_key_in_use_is_redacted(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    key = "jac_0123456789ab.the-key-itself"
    message, _ = _failed_run(tmp_path, f"echo 'key={key}' >&2", api_key=key)
    assert message == "exit code 3\nkey=[REDACTED]\n"
    assert capfd.readouterr().err == f"key={key}\n"  # our own copy is the user's


def test_variables_named_like_secrets_are_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DB_PASSWORD", "correct-horse-battery")
    monkeypatch.setenv("DEPLOY_CREDS", "creds-from-env")
    monkeypatch.setenv("SHORT_TOKEN", "abc12")
    script = 'echo "$DB_PASSWORD|$DEPLOY_CREDS|$SHORT_TOKEN"'
    message, _ = _failed_run(tmp_path, script)
    assert message == "exit code 3\n[REDACTED]|creds-from-env|abc12\n"
    # --redact adds a pattern.
    message, _ = _failed_run(tmp_path, script, redact_patterns=(*DEFAULT_PATTERNS, "*_creds"))
    assert message == "exit code 3\n[REDACTED]|[REDACTED]|abc12\n"
    assert "correct-horse-battery|creds-from-env|abc12" in capfd.readouterr().out


def test_sensitive_values_of_the_dispatch_context_are_redacted(tmp_path: Path) -> None:
    context = {
        "release": {
            "encryptedVariables": ["apiSecret"],
            "variables": {"apiSecret": "ctx-value-1234", "region": "eu-west-1"},
        },
        "variables": {"apiSecret": "ctx-value-1234", "ADMIN_PASSWORD": "ctx-admin-pw"},
    }
    job = claimed_job().model_copy(update={"dispatch_context": context})
    message, _ = _failed_run(tmp_path, "echo ctx-value-1234 eu-west-1 ctx-admin-pw", job=job)
    assert message == "exit code 3\n[REDACTED] eu-west-1 [REDACTED]\n"


def test_a_secret_beyond_the_tail_start_leaves_no_fragment(tmp_path: Path) -> None:
    # The tail is cut from redacted output: never the end of a secret with its start cut off.
    key = "jac_0123456789ab.the-key-itself"
    message, _ = _failed_run(tmp_path, f"printf '{key}xy'", api_key=key, output_tail_bytes=8)
    assert message == "exit code 3\nACTED]xy"


# --- values handed over at run time -----------------------------------------------------------


def test_the_handover_socket_serves_only_the_command_s_session() -> None:
    redactor = Redactor()
    handover = HandoverSocket(redactor, Log())
    try:
        assert handover.directory.stat().st_mode & 0o777 == 0o700
        # Before the command started, nobody is served.
        with pytest.raises(OSError):
            hand_over(str(handover.path), b"early-value", run_pid=os.getpid())
        handover.admit(os.getsid(0) + 1_000_000)  # a session we are not in
        with pytest.raises(OSError):
            hand_over(str(handover.path), b"outside-value", run_pid=os.getpid())
        handover.admit(os.getsid(0))
        assert hand_over(str(handover.path), b"short", run_pid=os.getpid()) is False
        assert hand_over(str(handover.path), "inside-välue".encode(), run_pid=os.getpid()) is True
        assert redactor.redact("inside-välue early-value".encode()) == b"[REDACTED] early-value"
    finally:
        handover.close()
    assert not handover.directory.exists()


def test_a_stalled_connection_does_not_hold_up_another_add() -> None:
    # One of the job's processes connects and sends nothing: another add is served meanwhile,
    # and the first is still served when it does send (within its deadline, long here so a
    # busy machine cannot end it first). Served one at a time, the second add would wait for
    # the first to time out, and the first would then get no answer.
    redactor = Redactor()
    handover = HandoverSocket(redactor, Log(), connection_seconds=120.0)
    try:
        handover.admit(os.getsid(0))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stalled:
            stalled.settimeout(30.0)
            stalled.connect(str(handover.path))
            added = hand_over(
                str(handover.path), b"second-value", run_pid=os.getpid(), timeout=30.0
            )
            assert added is True
            stalled.sendall(b"first-value")
            stalled.shutdown(socket.SHUT_WR)
            assert stalled.recv(64) == ADDED
        assert redactor.redact(b"first-value second-value") == b"[REDACTED] [REDACTED]"
    finally:
        handover.close()


def test_a_connection_past_its_deadline_is_dropped_unanswered() -> None:
    redactor = Redactor()
    handover = HandoverSocket(redactor, Log(), connection_seconds=0.0)
    try:
        handover.admit(os.getsid(0))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as late:
            late.settimeout(30.0)
            late.connect(str(handover.path))
            assert late.recv(64) == b""  # closed by the server, not by our timeout
        assert redactor.count == 0
    finally:
        handover.close()


@contextlib.contextmanager
def _impostor(socket_path: Path, got: Path) -> Iterator[None]:
    got.touch()
    process = subprocess.Popen(
        [sys.executable, "-c", IMPOSTOR, str(socket_path), str(got)],
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "listening\n"
        yield
    finally:
        process.kill()
        process.wait()


def test_redact_add_refuses_a_link_put_in_place_of_the_socket_directory(tmp_path: Path) -> None:
    # The attack as found: another process of our user renames the socket's directory and puts
    # a link to a directory with its own socket in its place. Before, the value went to it
    # (exit 0) and then appeared unmasked in the job's log.
    redactor = Redactor()
    handover = HandoverSocket(redactor, Log())
    attacker_dir = tmp_path / "attacker"
    attacker_dir.mkdir(mode=0o700)
    got = tmp_path / "got"
    env = handover.environment()
    assert env[RUN_PID_ENV] == str(os.getpid())
    moved = handover.directory.with_name(handover.directory.name + "-moved")
    try:
        handover.admit(os.getsid(0))
        with _impostor(attacker_dir / "s", got):
            handover.directory.rename(moved)
            handover.directory.symlink_to(attacker_dir)
            result = _redact_add("stolen-value", env)
            assert result.exit_code == 4, result.stderr
            assert "refused to hand the value over" in result.stderr
            assert "link" in result.stderr
            assert "stolen-value" not in result.stdout + result.stderr
            # A directory of ours, 0700, in its place (no link): the listener's pid tells.
            handover.directory.unlink()
            attacker_dir.rename(handover.directory)
            result = _redact_add("stolen-value", env)
            assert result.exit_code == 4, result.stderr
            assert f"not this job's `jobagentctl run` (process {os.getpid()})" in result.stderr
        assert b"stolen-value" not in got.read_bytes()
        assert redactor.count == 0
    finally:
        handover.close()
        shutil.rmtree(moved, ignore_errors=True)


def test_redact_add_refuses_a_listener_that_is_not_the_run_named(tmp_path: Path) -> None:
    # The socket is the real one, but the pid exported is another process's: refused (the
    # listener is checked against the pid, not taken on trust).
    redactor = Redactor()
    handover = HandoverSocket(redactor, Log())
    try:
        handover.admit(os.getsid(0))
        env = {**handover.environment(), RUN_PID_ENV: str(os.getppid())}
        result = _redact_add("some-value", env)
        assert result.exit_code == 4
        assert f"the socket's listener is process {os.getpid()}" in result.stderr
        assert redactor.count == 0
        # Its own pid: handed over.
        assert _redact_add("some-value", handover.environment()).exit_code == 0
        assert redactor.count == 1
    finally:
        handover.close()


def test_redact_add_refuses_a_directory_that_is_not_private() -> None:
    redactor = Redactor()
    handover = HandoverSocket(redactor, Log())
    try:
        handover.admit(os.getsid(0))
        handover.directory.chmod(0o755)
        result = _redact_add("some-value", handover.environment())
        assert result.exit_code == 4 and "not private" in result.stderr
        assert redactor.count == 0
    finally:
        handover.close()


_LISTEN = """
from jobagentctl.supervisor.process.jobfiles import sweep_stale_job_files
from jobagentctl.supervisor.process.handover import HandoverSocket
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.output.redact import Redactor
handover = HandoverSocket(Redactor(), Log())
print(handover.directory, flush=True)
input()
"""


def test_a_killed_run_s_socket_directory_is_swept_by_a_later_run(short_tempdir: Path) -> None:
    # A `run` SIGKILLed while its job ran left its socket directory behind for good; a later
    # run sweeps it (as job directories are), never a live run's.
    tmp_path = short_tempdir
    killed = subprocess.Popen(
        [sys.executable, "-c", _LISTEN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        text=True,
    )
    assert killed.stdout is not None
    left = Path(killed.stdout.readline().strip())
    killed.kill()
    killed.wait()
    live = HandoverSocket(Redactor(), Log())
    try:
        assert left.parent == live.directory.parent == tmp_path
        old = time.time() - 3600
        for path in (left, live.directory):
            os.utime(path, (old, old))
        assert sweep_stale_job_files() == 1
        assert not left.exists()
        assert live.directory.exists()  # its run holds the lock
    finally:
        live.close()


def _redact_add(stdin: str, env: dict[str, str]) -> Result:
    return CliRunner().invoke(app, ["redact", "add"], input=stdin, env=env)


def test_redact_add_exit_codes(tmp_path: Path) -> None:
    no_supervisor = {REDACT_SOCKET_ENV: ""}
    result = _redact_add("", no_supervisor)
    assert (result.exit_code, "no value on stdin" in result.stderr) == (2, True)
    result = _redact_add("abc12\n", no_supervisor)
    assert result.exit_code == 2 and "too short" in result.stderr
    result = _redact_add("long-enough\n", no_supervisor)
    assert result.exit_code == 3 and REDACT_SOCKET_ENV in result.stderr
    gone = {REDACT_SOCKET_ENV: str(tmp_path / "gone" / "s"), RUN_PID_ENV: str(os.getpid())}
    result = _redact_add("long-enough", gone)
    assert result.exit_code == 3 and "cannot reach" in result.stderr
    assert "long-enough" not in result.stdout + result.stderr
    # A socket but no pid of `run` to check it against: refused, never sent.
    result = _redact_add("long-enough", {REDACT_SOCKET_ENV: gone[REDACT_SOCKET_ENV]})
    assert result.exit_code == 4 and RUN_PID_ENV in result.stderr


def test_a_value_handed_over_by_the_command_is_redacted(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    add = shlex.join([sys.executable, "-m", "jobagentctl", "redact", "add"])
    script = f"echo fetched-at-run-time | {add} && echo 'got fetched-at-run-time'"
    message, _ = _failed_run(tmp_path, script)
    assert message == "exit code 3\ngot [REDACTED]\n"
    assert capfd.readouterr().out == "got fetched-at-run-time\n"
