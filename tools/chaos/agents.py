"""The agents of a chaos run: ``jobagentctl run --loop`` processes in numbered slots, and the
signals the fault schedule sends them (kill, stop/continue, interrupt, drain).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["Agent", "alive", "children", "tree_groups"]


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the supervisor's child runs in a session of its own)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces: the fields after the last ")" are fixed.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[1] == str(pid):
            found.append(int(entry))
    return found


def tree_groups(pid: int) -> list[int]:
    """The process groups of every descendant of ``pid``: with the watchdog, its own group
    and the job's (and any a daemon made), so a "host" fault can reach all of them."""
    groups: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(child)
            if group not in groups:
                groups.append(group)
        todo += children(child)
    return groups


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Agent:
    """One ``jobagentctl run --loop`` process in a slot; restarted in the same slot."""

    def __init__(self, slot: int, workdir: Path, env: dict[str, str], command: list[str]):
        self.slot = slot
        self.workdir = workdir
        self.env = env
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self.started_at = 0.0  # wall clock of the current incarnation's start
        self.busy = False  # killed and waiting for its restart, or stopped
        self.draining = False
        self._stopped_groups: list[int] = []

    @property
    def report_path(self) -> Path:
        return self.workdir / f"agent{self.slot}.report.jsonl"

    def log_path(self, incarnation: int | None = None) -> Path:
        return self.workdir / f"agent{self.slot}.{incarnation or self.incarnation}.log"

    def start(self) -> None:
        self.incarnation += 1
        self.started_at = time.time()
        with self.log_path().open("wb") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Our terminal's Ctrl-C must not reach the agents: the harness decides.
                start_new_session=True,
            )
        self.busy = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, with_job: bool) -> None:
        """SIGKILL the agent; with its job's process group when ``with_job``."""
        if not self.running():
            return
        with contextlib.suppress(ProcessLookupError):
            # Freeze first so it cannot start a child between our look and the kill.
            os.kill(self.pid, signal.SIGSTOP)
            if with_job:
                for group in tree_groups(self.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(group, signal.SIGKILL)
            os.kill(self.pid, signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)
        self.busy = True

    def stop(self, with_job: bool) -> None:
        """SIGSTOP the agent (and its job's group): it keeps its claim but cannot heartbeat."""
        if not self.running():
            return
        os.kill(self.pid, signal.SIGSTOP)
        self._stopped_groups = tree_groups(self.pid) if with_job else []
        for child in self._stopped_groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGSTOP)
        self.busy = True

    def cont(self) -> None:
        for child in self._stopped_groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGCONT)
        self._stopped_groups = []
        if self.running():
            os.kill(self.pid, signal.SIGCONT)
        self.busy = False

    def interrupt(self) -> None:
        """SIGINT, as Ctrl-C would: the job is stopped and released, the agent exits 130."""
        if self.running():
            os.kill(self.pid, signal.SIGINT)
        self.busy = True

    def drain(self) -> None:
        """SIGTERM: in --loop mode, finish the current job and exit 0."""
        self.draining = True
        if self.running():
            self.cont()
            os.kill(self.pid, signal.SIGTERM)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path().read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
