"""`jobagentctl run` against a real server: secrets the command prints reach the server's
failure message (and ``--report``) as ``[REDACTED]``, while our own stdout shows them.

One test for every source at once (starting `run` costs a second on a busy machine): the API
key in use, a variable named like a secret, one named by ``--redact``, a sensitive variable of
the dispatch context, and a value the command hands over with `jobagentctl redact add`.
"""

from __future__ import annotations

import shlex

from tests.fixtures.cli import cli_command

from .runs import Harness

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
