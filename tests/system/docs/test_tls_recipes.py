"""docs/operators.md's TLS recipes, run: the server started with the block's flags and a client
with its CA bundle; the nginx file, served by a real nginx in front of a ``--behind-proxy``
server, with a claim long-poll through it.

The placeholders are substituted (certificate paths, the host and ports); the rest is the doc's
text as it is now.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.fixtures.live_server import clean_env, free_port
from tests.fixtures.processes import TOKEN_VARIABLE, new_token
from tests.fixtures.tls import make_tls_files
from tests.fixtures.waiting import wait_until

from .conftest import Sandbox, needs
from .recipes import block, shell_lines

HTTPS_BLOCK = "docs/operators.md › Serving HTTPS"
NGINX_BLOCK = "docs/operators.md › A reverse proxy in front (nginx)"
# The longest a long-poll may be held with the default max_wait_seconds, plus the client's
# margin (client/_connection.py's LONG_POLL_MARGIN).
LONGEST_LONG_POLL = 30 * 1.25 + 10


def _box(workdir: Path, **env: str) -> Sandbox:
    workdir.mkdir(parents=True, exist_ok=True)
    return Sandbox.bare(
        workdir,
        {
            **clean_env(workdir),
            "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/bin",
            "JOBAGENTCTL_SERVER_DATABASE": f"sqlite:///{workdir / 'jobagent.db'}",
            TOKEN_VARIABLE: new_token(),
            **env,
        },
    )


def _ok(box: Sandbox, line: str, **env: str) -> str:
    proc = box.line(line, **env)
    assert proc.wait() == 0, proc.output()
    return proc.stdout


def test_serving_https_with_the_blocks_flags(tmp_path: Path) -> None:
    start, export, listing = shell_lines(block(HTTPS_BLOCK).text)
    files = make_tls_files(tmp_path / "etc")  # server.pem, server.key, ca.pem, as in the doc
    port = free_port()

    def here(line: str) -> str:
        line = line.replace("/etc/jobagentctl/", f"{files.cert.parent}/")
        return line.replace("jobs.example.com:8080", f"127.0.0.1:{port}")

    box = _box(tmp_path / "box", JOBAGENTCTL_SERVER_PORT=str(port))
    try:
        _ok(box, "jobagentctl server init --write-config")
        server = box.line(here(start))
        wait_until(lambda: "listening on https://" in server.stderr, what="the HTTPS server")
        client = f"{here(export)}; jobagentctl agents register docs -o json"
        agent = json.loads(_ok(box, client))["id"]
        _ok(box, f"{here(export)}; {listing}", JOBAGENTCTL_AGENT=agent)
    finally:
        box.close()


def _nginx_conf(prefix: Path, server_port: int, proxy_port: int, cert: Path, key: Path) -> Path:
    text = block(NGINX_BLOCK).text
    for placeholder, value in (
        ("listen 443 ssl;", f"listen 127.0.0.1:{proxy_port} ssl;"),
        ("/etc/nginx/tls/jobs.example.com.pem", str(cert)),
        ("/etc/nginx/tls/jobs.example.com.key", str(key)),
        ("127.0.0.1:8080", f"127.0.0.1:{server_port}"),
    ):
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"pid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\nevents {{}}\nhttp {{\n"
        f"access_log off;\nclient_body_temp_path {prefix}/body;\n"
        f"proxy_temp_path {prefix}/proxy;\n{text}\n}}\n",
        encoding="utf-8",
    )
    return conf


def _long_polls(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_the_nginx_example_carries_a_claim_long_poll(tmp_path: Path) -> None:
    needs("nginx")
    text = block(NGINX_BLOCK).text
    read_timeout = re.search(r"proxy_read_timeout (\d+)s;", text)
    assert read_timeout and int(read_timeout.group(1)) > LONGEST_LONG_POLL
    files = make_tls_files(tmp_path / "tls")
    server_port, proxy_port = free_port(), free_port()
    conf = _nginx_conf(tmp_path, server_port, proxy_port, files.cert, files.key)
    box = _box(tmp_path / "box", JOBAGENTCTL_SERVER_PORT=str(server_port))
    nginx = None
    try:
        _ok(box, "jobagentctl server init --write-config")
        server = box.line("jobagentctl server start --behind-proxy 127.0.0.1")
        wait_until(lambda: "listening on http://" in server.stderr, what="the server")
        nginx = subprocess.Popen(
            ["nginx", "-p", str(tmp_path), "-c", str(conf), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        via = {"JOBAGENTCTL_URL": f"https://127.0.0.1:{proxy_port}"}
        via["JOBAGENTCTL_CA_BUNDLE"] = str(files.ca)
        agent = wait_until(
            lambda: (
                box.line("jobagentctl agents register docs -o json", **via).wait() == 0
                and json.loads(_ok(box, "jobagentctl agents list -o json", **via))[0]["id"]
            ),
            what="nginx to pass requests on",
        )
        via["JOBAGENTCTL_AGENT"] = agent
        claim = box.line("jobagentctl claim --wait 60 -o json", **via)
        waiting = "jobagentctl_long_polls_waiting 1.0"
        wait_until(lambda: waiting in _long_polls(server_port), what="the long-poll via nginx")
        job = json.loads(_ok(box, "jobagentctl jobs enqueue -o json", **via))
        assert claim.wait() == 0, claim.output()
        assert json.loads(claim.stdout)["id"] == job["id"]
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(30)
        box.close()
