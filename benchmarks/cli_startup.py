"""CLI start-up, whole processes, side by side in one run (issue 15): every figure is a ratio.

The floor is the chosen stack's own import, ``python -c "import typer, httpx, pydantic_settings"``.
Each round runs every process once, in turn, so a busy machine slows them all alike; the table
shows medians. The round trips go to a real ``jobagentctl server start`` on SQLite.

    .venv/bin/python -m benchmarks.cli_startup            # 15 rounds
    .venv/bin/python -m benchmarks.cli_startup --runs 5 --json

Targets: heartbeat, complete, ``claim -o env`` ≤ 1.0× the floor; ``list`` ≤ 1.1×; one Tab
completion ≤ 0.10 s. Wall time and the process's own CPU time are both shown: on a busy machine
wall time also counts waiting for the cores (and, in a round trip, for the server).

The ``(https)`` rows are the same commands against a second server process on the same
database serving HTTPS with a private CA (``JOBAGENTCTL_CA_BUNDLE``): their difference from the
plain rows is what TLS costs a command (the CA bundle, the handshake); the plain rows load no
CA bundle at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import Server, database

FLOOR = "python -c 'import typer, httpx, pydantic_settings'"


def _program() -> list[str]:
    """The console script a shell runs (``python -m jobagentctl`` if it is not installed)."""
    script = Path(sys.executable).parent / "jobagentctl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "jobagentctl"]


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock seconds and CPU seconds (user + system) of one whole process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate()
    elapsed = time.perf_counter() - t0
    # The child's own CPU time: on a busy machine the fairer figure (wall time also waits for
    # other processes, and for the server in the round trips).
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - _time.cpu_before  # type: ignore[attr-defined]
    _time.cpu_before = usage.ru_utime + usage.ru_stime  # type: ignore[attr-defined]
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}: {err.decode()[-500:]}")
    return elapsed, cpu


_time.cpu_before = 0.0  # type: ignore[attr-defined]


def measure(runs: int) -> dict[str, float]:
    """Median wall-clock seconds of each process (the figure `make bench` reports)."""
    return {name: wall for name, (wall, _) in measure_both(runs).items()}


def measure_both(runs: int) -> dict[str, tuple[float, float]]:
    """Median wall-clock and median CPU seconds of each process."""
    py, prog = sys.executable, _program()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBAGENTCTL_", "CTRL"))}
    base_env["XDG_CONFIG_HOME"] = "/nonexistent"
    samples: dict[str, list[tuple[float, float]]] = {}
    with (
        database("sqlite") as url,
        Server(url) as server,
        tempfile.TemporaryDirectory() as certs,
        _tls_server(url, server, Path(certs)) as (https_url, ca),
    ):
        env = server.agent_env(base_env)

        def job(lease: int = 3600) -> dict[str, str]:
            _, body = asyncio.run(
                server.call("POST", f"/job-agents/{server.agent}/jobs", {"jobAgentConfig": {}})
            )
            made = json.loads(body)
            _, body = asyncio.run(
                server.call(
                    "POST",
                    f"/job-agents/{server.agent}/jobs/{made['id']}/claim",
                    {"leaseSeconds": lease},
                )
            )
            claimed = json.loads(body)
            return {"JOBAGENTCTL_JOB_ID": claimed["id"], "JOBAGENTCTL_CLAIM_ID": claimed["claimId"]}

        held = {**env, **job()}
        done = {**env, **job()}
        # Ten queued jobs for `list`, and one queued job per `claim` round.
        for _ in range(10 + runs):
            asyncio.run(
                server.call("POST", f"/job-agents/{server.agent}/jobs", {"jobAgentConfig": {}})
            )
        complete_env = {
            **base_env,
            "_JOBAGENTCTL_COMPLETE": "complete_bash",
            "COMP_WORDS": "jobagentctl inspect",
            "COMP_CWORD": "1",
        }
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([py, "-c", "pass"], base_env),
            FLOOR: ([py, "-c", "import typer, httpx, pydantic_settings"], base_env),
            "--version": ([*prog, "--version"], base_env),
            "heartbeat -q": ([*prog, "-q", "heartbeat"], held),
            "complete --status successful": ([*prog, "complete", "--status", "successful"], done),
            "claim -o env": ([*prog, "claim", "-o", "env"], env),
            "list": ([*prog, "list"], env),
            "Tab completion (bash)": (prog, complete_env),
        }
        tls = {"JOBAGENTCTL_URL": https_url, "JOBAGENTCTL_CA_BUNDLE": str(ca)}
        cases[HTTPS_HEARTBEAT] = ([*prog, "-q", "heartbeat"], {**held, **tls})
        cases[HTTPS_LIST] = ([*prog, "list"], {**env, **tls})
        for argv, case_env in cases.values():  # warm the page cache and .pyc files
            _time(argv, case_env)
        for _ in range(runs):
            for name, (argv, case_env) in cases.items():
                samples.setdefault(name, []).append(_time(argv, case_env))
    return {
        name: (
            statistics.median(wall for wall, _ in values),
            statistics.median(cpu for _, cpu in values),
        )
        for name, values in samples.items()
    }


HTTPS_HEARTBEAT = "heartbeat -q (https)"
HTTPS_LIST = "list (https)"


@contextlib.contextmanager
def _tls_server(url: str, first: Server, certs: Path) -> Iterator[tuple[str, Path]]:
    """Another server process on ``first``'s database, serving HTTPS with a certificate of a
    private CA made here; yields its URL and the CA's file."""
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key, ca_file = certs / "server.pem", certs / "server.key", certs / "ca.pem"
    cert.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    key.touch(mode=0o600)
    key.write_bytes(issued.private_key_pem.bytes())
    ca.cert_pem.write_to_path(str(ca_file))
    server = Server(url, settings={"tls_cert": str(cert), "tls_key": str(key)})
    try:
        server.start_more(first)
        yield server.url.replace("http://", "https://", 1), ca_file
    finally:
        server.stop()


TARGETS = {
    "heartbeat -q": 1.0,
    "complete --status successful": 1.0,
    "claim -o env": 1.0,
    "list": 1.1,
}


def table(figures: dict[str, tuple[float, float]]) -> str:
    floor_wall, floor_cpu = figures[FLOOR]
    lines = [
        "| process | wall (median) | ratio to the floor | CPU (median) | CPU ratio | target |",
        "|---|---|---|---|---|---|",
    ]
    for name, (wall, cpu) in figures.items():
        target = ""
        if name in TARGETS:
            target = f"≤ {TARGETS[name]:.1f}×"
        elif name.startswith("Tab"):
            target = "≤ 0.10 s"
        lines.append(
            f"| `{name}` | {wall * 1000:.0f} ms | {wall / floor_wall:.2f}× "
            f"| {cpu * 1000:.0f} ms | {cpu / floor_cpu:.2f}× | {target} |"
        )
    load = os.getloadavg()[0]
    lines.append(f"\nLoad average (1 min) at the end: {load:.2f} on {os.cpu_count()} cores.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args()
    figures = measure_both(args.runs)
    print(json.dumps(figures, indent=2) if args.json else table(figures))


if __name__ == "__main__":
    main()
