"""Helpers for the `run` end-to-end tests: start `python -m jobagentctl run`, wait for events.

Waiting is always on a condition (a file the child writes, a job status on the server, a line
in the agent's stderr), polled with a generous deadline: two busy cores, no fixed sleeps.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import termios
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.agent_jobs import AgentJobs
from tests.fixtures.cli import Ran, cli_command
from tests.fixtures.live_server import LiveServer

__all__ = [
    "DEADLINE",
    "AgentRun",
    "Harness",
    "cli",
    "gone",
    "kill_group_of",
]

DEADLINE = 60.0


def gone(pid: int) -> bool:
    """The process is dead (or a zombie for someone else to reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@dataclass
class AgentRun:
    """One `jobagentctl run` process; its stdout and stderr go to files in ``workdir``."""

    proc: subprocess.Popen[bytes]
    workdir: Path
    blocked_fd: int | None = None  # read end of the pipe nobody reads (blocked_output)

    def unread_bytes(self) -> int:
        """How much waits in the pipe nobody reads (its capacity: 64 KiB on Linux)."""
        assert self.blocked_fd is not None
        buf = array.array("i", [0])
        fcntl.ioctl(self.blocked_fd, termios.FIONREAD, buf)
        return buf[0]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return (self.workdir / "stderr").read_text(errors="replace")

    def stdout(self) -> str:
        return (self.workdir / "stdout").read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = DEADLINE) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"run did not end in {timeout}s; stderr:\n{self.stderr()}"
            ) from None

    def report(self) -> list[dict[str, Any]]:
        path = self.workdir / "report.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def cli(harness: Harness, *args: str) -> Ran:
    """Run ``jobagentctl ARGS`` against the harness's server (as an operator would)."""
    return harness.server.cli(*args, timeout=DEADLINE)


class Harness(AgentJobs):
    """A live server, one agent on it, and the runs started for that agent (killed at the end);
    its jobs and attempts: :class:`AgentJobs`."""

    def __init__(self, server: LiveServer, tmp_path: Path) -> None:
        super().__init__(server, server.create_agent("e2e-agent"))
        self.tmp_path = tmp_path
        self.runs: list[AgentRun] = []
        self._blocked: list[int] = []

    def start(
        self,
        args: list[str],
        command: list[str],
        *,
        name: str = "run",
        env: dict[str, str] | None = None,
        blocked_output: bool = False,
        sigint_ignored: bool = False,
    ) -> AgentRun:
        """``jobagentctl run ARGS --report DIR/report.jsonl -- COMMAND`` in ``tmp_path/NAME``.

        ``blocked_output``: stdout and stderr go to a pipe nobody ever reads (a reader that
        never reads); its read end stays open until :meth:`close`. ``sigint_ignored``: started
        with SIGINT ignored, as a non-interactive shell starts a background job.
        """
        workdir = self.tmp_path / name
        workdir.mkdir(parents=True, exist_ok=True)
        full_env = {**self.server.base_env(), **self.server.env()}
        # TMPDIR: the job files of a run a test SIGKILLs stay in the test's own directory.
        full_env.update({"JOBAGENTCTL_AGENT": self.agent_id, "TMPDIR": str(workdir)})
        full_env.update(env or {})
        argv = cli_command("run", *args)
        argv += ["--report", str(workdir / "report.jsonl"), "--", *command]
        if sigint_ignored:
            argv = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *argv]
        if blocked_output:
            read_end, write_end = os.pipe()
            self._blocked.append(read_end)
            try:
                proc = subprocess.Popen(
                    argv,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=write_end,
                    stderr=write_end,
                    cwd=workdir,
                )
            finally:
                os.close(write_end)
            (workdir / "stdout").touch()
            (workdir / "stderr").write_text("(stdout and stderr went to a pipe nobody reads)\n")
            run = AgentRun(proc, workdir, blocked_fd=read_end)
            self.runs.append(run)
            return run
        with (workdir / "stdout").open("wb") as out, (workdir / "stderr").open("wb") as err:
            proc = subprocess.Popen(
                argv, env=full_env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=workdir
            )
        run = AgentRun(proc, workdir)
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:
            run.stop()
        for fd in self._blocked:
            os.close(fd)
        self._blocked.clear()


def kill_group_of(pid_file: Path) -> None:
    """SIGKILL the process group whose leader's pid the child wrote (cleanup after a crash)."""
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text().strip()), signal.SIGKILL)
