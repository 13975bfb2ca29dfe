"""The CLI against a real ``server start --tls-cert/--tls-key``, on SQLite and PostgreSQL: list,
a claim that long-polls, and ``run`` through heartbeats and its report, all over HTTPS with a
private CA trusted through ``JOBAGENTCTL_CA_BUNDLE``; the same server refused without it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.fixtures.cli import cli_command, run_cli
from tests.fixtures.live_server import LiveServer, LiveServerFactory, clean_env, free_port
from tests.fixtures.tls import make_tls_files
from tests.fixtures.waiting import wait_until

LONG_POLL_WAITING = "jobagentctl_long_polls_waiting 1.0"


def _metrics(server: LiveServer) -> str:
    status, text = server.request("GET", "/metrics", api_key=None)
    return str(text) if status == 200 else ""


def test_list_claim_long_poll_and_run_over_tls(
    live_server_factory: LiveServerFactory, tmp_path: Path
) -> None:
    tls = make_tls_files(tmp_path / "tls")
    server = live_server_factory(ca_bundle=tls.ca, **tls.settings())
    assert server.url.startswith("https://")
    assert "listening on https://" in server.log()
    agent = server.create_agent("tls")
    env = {**server.base_env(), **server.env(), "JOBAGENTCTL_AGENT": agent}

    job = server.enqueue(agent)
    listed = run_cli("list", "-o", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)] == [job["id"]]

    # run: heartbeats every ~1 s on a 2 s lease, then the report, all over TLS.
    report = tmp_path / "report.jsonl"
    ran = run_cli(
        "run", "--lease-seconds", "2", "--report", str(report), "--", "sleep", "2", env=env
    )
    assert ran.returncode == 0, ran.stderr
    [record] = [json.loads(line) for line in report.read_text().splitlines()]
    assert record["heartbeats"] >= 1 and record["reported"] is True, record
    assert server.get_job(job["id"])["status"] == "successful"

    # A claim long-polls over TLS and is answered when a job is queued.
    claim = subprocess.Popen(
        cli_command("claim", "--wait", "60", "-o", "json"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: LONG_POLL_WAITING in _metrics(server), what="the claim's long-poll")
        queued = server.enqueue(agent)
        out, err = claim.communicate(timeout=60)
    finally:
        claim.kill()
        claim.wait()
    assert claim.returncode == 0, err
    assert json.loads(out)["id"] == queued["id"]

    # The same server without its CA: refused in one line, exit 3, nothing sent in clear.
    untrusted = {k: v for k, v in env.items() if k != "JOBAGENTCTL_CA_BUNDLE"}
    refused = run_cli("list", env=untrusted)
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"error: TLS certificate of the server at {server.url} refused: issued by an "
        "authority that is not trusted (unable to get local issuer certificate); trust its "
        "CA with --ca-bundle PATH, JOBAGENTCTL_CA_BUNDLE, ca_bundle in the profile, or "
        "SSL_CERT_FILE"
    ]
    assert server.stop() == 0, server.log()  # SIGTERM drains over TLS too


def test_an_http_url_to_a_tls_port_says_to_use_https(
    live_server_factory: LiveServerFactory, tmp_path: Path
) -> None:
    tls = make_tls_files(tmp_path / "tls")
    server = live_server_factory(ca_bundle=tls.ca, **tls.settings())
    plain = server.url.replace("https://", "http://")
    env = {**server.base_env(), **server.env(), "JOBAGENTCTL_URL": plain}
    ran = run_cli("jobs", "list", env=env)
    assert ran.returncode == 3, ran.stderr
    assert ran.stderr.strip().splitlines() == [
        f"error: cannot reach the server at {plain}: it answered in TLS, not plain HTTP: "
        f"use {server.url}"
    ]


def test_server_start_with_an_expired_certificate_warns_in_one_line(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls", expired=True)
    env = {
        **clean_env(tmp_path),
        "JOBAGENTCTL_SERVER_DATABASE": f"sqlite:///{tmp_path / 'jobagent.db'}",
        "JOBAGENTCTL_SERVER_HOST": "127.0.0.1",
        "JOBAGENTCTL_SERVER_PORT": str(free_port()),
        "JOBAGENTCTL_SERVER_TLS_CERT": str(tls.cert),
        "JOBAGENTCTL_SERVER_TLS_KEY": str(tls.key),
    }
    server = subprocess.Popen(
        cli_command("server", "start"), env=env, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        assert server.stderr is not None
        for line in server.stderr:  # it still starts: the warning comes before it listens
            lines.append(line)
            if "listening on https://" in line:
                break
    finally:
        server.terminate()
        server.wait(timeout=60)
    warnings = [line for line in lines if "expired" in line]
    assert len(warnings) == 1, lines
    assert warnings[0].startswith(f"warning: TLS certificate {tls.cert} expired on 20")
    assert "renew it" in warnings[0]
