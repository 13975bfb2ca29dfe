"""What the tests of `run` share: options for a run, a run with a scripted client, and the
shell scripts and waits they use (real child processes, every wait with a deadline)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobagentctl.models import JobStatus
from jobagentctl.supervisor import Log, RunOptions, Supervisor

from .fakes import FakeClient

__all__ = ["DEADLINE", "options", "reports", "run", "sh", "trap_reason", "when"]

DEADLINE = 30.0  # generous: two busy cores


def options(tmp_path: Path, command: list[str], **overrides: object) -> RunOptions:
    base: dict[str, object] = {
        "command": command,
        "agent_id": uuid.uuid4(),
        "url": "http://127.0.0.1:9",
        "workspace_id": uuid.uuid4(),
        "api_key": "jac_x.secret",
        "grace": 5.0,
        "report_path": tmp_path / "report.jsonl",
        "report_timeout": 5.0,
    }
    base.update(overrides)
    return RunOptions(**base)  # type: ignore[arg-type]


def run(client: FakeClient, opts: RunOptions) -> tuple[int, list[str], list[dict[str, Any]]]:
    logs: list[str] = []
    log = Log(info=logs.append, warn=logs.append, debug=logs.append)
    code = Supervisor(opts, lambda: client, log=log).run()
    records = []
    if opts.report_path is not None and opts.report_path.exists():
        lines = opts.report_path.read_text().splitlines()
        records = [json.loads(line) for line in lines]
    return code, logs, records


def when(condition: Callable[[], bool], action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` in a thread as soon as ``condition()`` holds (polled, with a deadline)."""

    def target() -> None:
        deadline = time.monotonic() + DEADLINE
        while not condition():
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def trap_reason(tmp_path: Path, signame: str = "TERM", code: int = 0) -> str:
    """Shell that records the stop reason (and that it got ``signame``), then exits."""
    return (
        f'trap \'cat "$JOBAGENTCTL_STOP_REASON_FILE" > {tmp_path}/reason; '
        f"echo {signame} > {tmp_path}/got; exit {code}' {signame}; "
        f"touch {tmp_path}/ready; while :; do sleep 0.05; done"
    )


def reports(client: FakeClient) -> list[tuple[JobStatus, str | None, object]]:
    return [
        (c.args[1], c.kwargs["message"], c.kwargs["claim_id"])
        for c in client.named("update_status")
    ]
