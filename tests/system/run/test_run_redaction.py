"""`jobagentctl run` against a real server: secrets the command prints reach the server's
failure message (and ``--report``) as ``[REDACTED]``, while our own stdout shows them.

One test for every source at once (starting `run` costs a second on a busy machine): the API
key in use, a variable named like a secret, one named by ``--redact``, a sensitive variable of
the dispatch context, and a value the command hands over with `jobagentctl redact add`. And
against the ctrlplane stand-in (V1: no lease, nothing shipped), the failure message sent is
redacted all the same. The parts of composite secrets printed alone are redacted too, and
`redact add` refuses a socket another process put in the place of `run`'s.
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.fixtures.cli import cli_command
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.processes import IMPOSTOR

from .runs import DEADLINE, AgentRun, Harness

SECRETS = {
    "DB_PASSWORD": "e2e-db-pa55word",
    "DEPLOY_CREDS": "e2e-deploy-creds",
    "SHORT_TOKEN": "e2e12",  # under 6 characters: kept
}
CONTEXT_SECRET = "e2e-context-secret"
HANDED_OVER = "e2e-handed-över"


def test_secrets_reach_the_server_redacted_and_our_stdout_unchanged(harness: Harness) -> None:
    job_id = harness.enqueue(
        dispatch_context={
            "release": {
                "encryptedVariables": ["dbUrl"],
                "variables": {"dbUrl": CONTEXT_SECRET, "region": "eu-west-1"},
            }
        }
    )
    add = shlex.join(cli_command("redact", "add"))
    script = (
        f'echo "$JOBAGENTCTL_API_KEY $DB_PASSWORD"; echo "$DEPLOY_CREDS $SHORT_TOKEN" >&2; '
        f"echo {CONTEXT_SECRET} eu-west-1; "
        f"printf '%s\\n' '{HANDED_OVER}' | {add} || exit 99; "
        f"echo 'late {HANDED_OVER}'; exit 3"
    )
    run = harness.start(
        ["--pass-api-key", "--redact", "*_creds"], ["sh", "-c", script], env=SECRETS
    )
    assert run.wait() == 3, run.stderr()
    key = harness.server.api_key
    message = harness.job(job_id)["message"]
    assert message.startswith("exit code 3\n")
    lines = message.splitlines()[1:]
    # Between two pipes, arrival order is the kernel's call: compare as sets.
    assert sorted(lines) == sorted(
        [
            "[REDACTED] [REDACTED]",
            "[REDACTED] e2e12",
            "[REDACTED] eu-west-1",
            "late [REDACTED]",
        ]
    )
    for secret in (key, *list(SECRETS.values())[:2], CONTEXT_SECRET, HANDED_OVER):
        assert secret not in message
    [record] = run.report()
    assert record["message"] == message
    # Our own copy is the user's: unchanged.
    assert run.stdout() == (
        f"{key} {SECRETS['DB_PASSWORD']}\n{CONTEXT_SECRET} eu-west-1\nlate {HANDED_OVER}\n"
    )
    assert f"{SECRETS['DEPLOY_CREDS']} e2e12\n" in run.stderr()
    # The output shipped to the job's log went through the same redactor.
    status, page = harness.server.request("GET", f"jobs/{job_id}/logs")
    assert status == 200, page
    shipped = b"".join(base64.b64decode(c["data"]) for c in page["chunks"]).decode()
    for secret in (key, *list(SECRETS.values())[:2], CONTEXT_SECRET, HANDED_OVER):
        assert secret not in shipped
    assert sorted(shipped.splitlines()) == sorted(lines)


def test_against_ctrlplane_the_failure_message_is_redacted(
    ctrlplane: CtrlplaneStandIn, tmp_path: Path
) -> None:
    # ctrlplane's own shape: the release names its sensitive variables, the dispatcher copies
    # the release's variables into the context's.
    variables = {"dbUrl": CONTEXT_SECRET, "region": "eu-west-1"}
    context = {
        "release": {"encryptedVariables": ["dbUrl"], "variables": variables},
        "variables": variables,
    }
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, dispatch_context=context)
    env = {**ctrlplane.base_env(), **ctrlplane.env(), "JOBAGENTCTL_AGENT": agent}
    env.update({"TMPDIR": str(tmp_path), "DB_PASSWORD": SECRETS["DB_PASSWORD"]})
    script = f'echo "$DB_PASSWORD {CONTEXT_SECRET} eu-west-1"; exit 3'
    proc = subprocess.run(
        [*cli_command("run"), "--report", "report.jsonl", "--", "sh", "-c", script],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert proc.returncode == 3, proc.stderr
    assert ctrlplane.job(job).status == "failure"
    # ctrlplane keeps only the status of an update: the message sent is in --report.
    [line] = (tmp_path / "report.jsonl").read_text().splitlines()
    assert json.loads(line)["message"] == "exit code 3\n[REDACTED] [REDACTED] eu-west-1\n"
    assert proc.stdout == f"{SECRETS['DB_PASSWORD']} {CONTEXT_SECRET} eu-west-1\n"


def test_every_part_of_a_composite_secret_is_redacted_on_its_own(harness: Harness) -> None:
    # Each secret below is redacted whole already; what a command prints is often one part of
    # it: the API key's secret after its prefix, a URL's password, a `user:password` pair's
    # password, the password inside Basic credentials.
    basic = base64.b64encode(b"deployer:ctx-basic-pw").decode()
    job_id = harness.enqueue(
        dispatch_context={
            "resource": {"config": {"vars": [{"value": f"Basic {basic}", "sensitive": True}]}}
        }
    )
    env = {
        # Not named like a secret: the password in the URL is one all the same.
        "DATABASE_URL": "postgres://app:url-pa%2Fss@db.internal:5432/app",
        "REGISTRY_TOKEN": "robot:pair-secret-part",
    }
    script = (
        'echo "key=${JOBAGENTCTL_API_KEY#*.}"; '
        "echo \"url=$(printf '%s' \"$DATABASE_URL\" | sed 's|.*:\\(.*\\)@.*|\\1|')\" url-pa/ss; "
        'echo "pair=${REGISTRY_TOKEN#*:}"; '
        "echo basic=ctx-basic-pw; exit 3"
    )
    run = harness.start(["--pass-api-key"], ["sh", "-c", script], env=env)
    assert run.wait() == 3, run.stderr()
    secret_part = harness.server.api_key.partition(".")[2]
    message = harness.job(job_id)["message"]
    assert message == (
        "exit code 3\nkey=[REDACTED]\nurl=[REDACTED] [REDACTED]\npair=[REDACTED]\n"
        "basic=[REDACTED]\n"
    )
    [record] = run.report()
    assert record["message"] == message
    status, page = harness.server.request("GET", f"jobs/{job_id}/logs")
    assert status == 200, page
    shipped = b"".join(base64.b64decode(c["data"]) for c in page["chunks"]).decode()
    assert shipped == message.removeprefix("exit code 3\n")
    for part in (secret_part, "url-pa%2Fss", "url-pa/ss", "pair-secret-part", "ctx-basic-pw"):
        assert part not in message + shipped
    # Our own copy is the user's: unchanged.
    assert f"key={secret_part}\n" in run.stdout()


def _wait_for(path: Path, run: AgentRun) -> None:
    deadline = time.monotonic() + DEADLINE
    while not path.exists():
        assert run.proc.poll() is None, run.stderr()
        assert time.monotonic() < deadline, f"no {path.name}; stderr:\n{run.stderr()}"
        time.sleep(0.05)


def test_redact_add_refuses_a_socket_put_in_place_by_another_process(
    harness: Harness, tmp_path: Path
) -> None:
    # The attack as found: while the job runs, another process of our user renames the
    # socket's directory and puts a link to its own socket's directory in its place. The job's
    # next `redact add` handed it the value and exited 0; now it exits 4 and sends nothing.
    harness.enqueue()
    work = tmp_path / "attack"
    attacker = tmp_path / "impostor"
    work.mkdir()
    attacker.mkdir(mode=0o700)
    got = tmp_path / "got"
    got.touch()
    add = shlex.join(cli_command("redact", "add"))
    script = (
        f'echo "$JOBAGENTCTL_REDACT_SOCKET" > {work}/socket.partial; '
        f"mv {work}/socket.partial {work}/socket; "
        f"while [ ! -e {work}/swapped ]; do sleep 0.05; done; "
        f"printf '%s' e2e-stolen-value | {add}; echo \"add exit $?\" >&2"
    )
    impostor = subprocess.Popen(
        [sys.executable, "-c", IMPOSTOR, str(attacker / "s"), str(got)],
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    moved: Path | None = None
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "listening\n"
        run = harness.start([], ["sh", "-c", script])
        _wait_for(work / "socket", run)
        directory = Path((work / "socket").read_text().strip()).parent
        moved = directory.with_name(directory.name + "-moved")
        directory.rename(moved)
        directory.symlink_to(attacker)
        (work / "swapped").touch()
        assert run.wait() == 0, run.stderr()
        assert "add exit 4" in run.stderr()
        assert "refused to hand the value over" in run.stderr()
        assert b"e2e-stolen-value" not in got.read_bytes()
    finally:
        impostor.kill()
        impostor.wait()
        if moved is not None:
            moved.with_name(moved.name.removesuffix("-moved")).unlink(missing_ok=True)
            shutil.rmtree(moved, ignore_errors=True)
