"""Fixtures for running the docs' recipes: a server, an agent, a sandbox with stand-ins.

``sandbox`` is a working directory with stand-in scripts (``deploy.sh``, ``ci/job.sh``), and an
environment pointing ``jobagentctl`` (this checkout's, first on ``PATH``) at a real server with
a fresh agent. Every process a recipe
starts carries a token, so a test can ask what is still running and kill it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.agent_jobs import AgentJobs
from tests.fixtures.live_server import LiveServer
from tests.fixtures.processes import TOKEN_VARIABLE, kill_tagged, new_token, tagged
from tests.fixtures.waiting import wait_until

# The stand-in for the recipes' deploy.sh (and ci/job.sh): it records each
# deploy, leaves a background process in its group (a recipe must stop it with the group; it
# does not hold the output pipes, which would make `run` wait --grace for them), works until
# the test creates "$RELEASE" (created up front when the test does not care), and exits
# $DEPLOY_EXIT.
DEPLOY_SH = """#!/usr/bin/env bash
echo "$JOBAGENTCTL_JOB_ID ${JOBAGENTCTL_ATTEMPT:-} ${1:-}" >> "$DEPLOY_LOG"
echo "deploying ${1:-}"
sleep 300 >/dev/null 2>&1 &
while [ ! -e "$RELEASE" ]; do sleep 0.05; done
echo "deployed"
exit "${DEPLOY_EXIT:-0}"
"""


def _session(sid: int) -> str:
    """The processes of session ``sid`` (a recipe's: it starts one), one line each."""
    lines = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:
                continue
            wchan = (entry / "wchan").read_text() or "-"
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        lines.append(f"{entry.name} {fields[1]} {fields[2]} {fields[0]} {wchan} {args[:200]}")
    return "\n".join(sorted(lines)) or "(none left)"


class Proc:
    """A recipe process: stdout and stderr read as they come (so a pipe never fills)."""

    def __init__(
        self, argv: Sequence[str], *, cwd: Path, env: dict[str, str], stdin: Any = None
    ) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self.stdout_closed = threading.Event()
        self._readers = [
            threading.Thread(target=self._read, args=(stream, sink, is_stdout), daemon=True)
            for stream, sink, is_stdout in (
                (self.proc.stdout, self._out, True),
                (self.proc.stderr, self._err, False),
            )
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, sink: list[bytes], is_stdout: bool) -> None:
        with stream:
            for chunk in iter(lambda: stream.read1(65536), b""):
                sink.append(chunk)
        if is_stdout:
            self.stdout_closed.set()

    @property
    def stdout(self) -> str:
        return b"".join(self._out).decode(errors="replace")

    @property
    def stderr(self) -> str:
        return b"".join(self._err).decode(errors="replace")

    def wait(self, timeout: float = 120.0) -> int:
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stuck = _session(self.proc.pid)  # before the kill: what each process was doing
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"{self.proc.args!r} did not end in {timeout:g}s\n"
                f"its session (pid ppid pgid state wchan command):\n{stuck}\n"
                f"stdout:\n{self.stdout}\nstderr:\n{self.stderr}"
            ) from None
        # The last output may still be in the pipes: let the readers get it (a process left
        # behind holding a pipe is the test's to find, so do not wait for it forever).
        for reader in self._readers:
            reader.join(10)
        return status

    def output(self) -> str:
        return f"exit {self.proc.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


class Sandbox(AgentJobs):
    """A working directory and environment for running recipes against ``server``, as an
    agent of its own (its jobs and attempts: :class:`AgentJobs`)."""

    def __init__(self, server: LiveServer, workdir: Path) -> None:
        self.token = new_token()
        super().__init__(server, server.create_agent(f"docs-{self.token[:8]}"))
        self.dir = workdir
        self.deploy_log = workdir / "deploys.log"
        self.release_file = workdir / "release"
        workdir.mkdir(parents=True, exist_ok=True)
        self.write("deploy.sh", DEPLOY_SH, executable=True)
        self.write("ci/job.sh", DEPLOY_SH, executable=True)
        self.env: dict[str, str] = {
            **server.base_env(),
            **server.env(),
            "JOBAGENTCTL_AGENT": self.agent_id,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(workdir / "home"),
            "DEPLOY_LOG": str(self.deploy_log),
            "RELEASE": str(self.release_file),
            TOKEN_VARIABLE: self.token,
        }
        self.procs: list[Proc] = []

    @classmethod
    def bare(cls, workdir: Path, env: dict[str, str]) -> Sandbox:
        """No server, no agent: ``env`` as given (it must carry a process token)."""
        box = cls.__new__(cls)
        box.dir = workdir
        box.token = env[TOKEN_VARIABLE]
        box.env = env
        box.procs = []
        return box

    def write(self, name: str, text: str, *, executable: bool = False) -> Path:
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if executable:
            path.chmod(0o755)
        return path

    def release(self) -> None:
        """Let the stand-in deploys finish."""
        self.release_file.touch()

    def deploys(self) -> list[str]:
        try:
            return self.deploy_log.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []

    def start(self, argv: Sequence[str], **env: str) -> Proc:
        proc = Proc(argv, cwd=self.dir, env={**self.env, **env})
        self.procs.append(proc)
        return proc

    def line(self, line: str, **env: str) -> Proc:
        """One shell line, as a CI step runs it (``bash -c``: a lone command is exec'd, so
        a signal sent to the step reaches it)."""
        return self.start(["bash", "-c", line], **env)

    def bash(self, script: str, **env: str) -> Proc:
        """Run ``script`` (the recipe's text, verbatim) with ``bash`` in the sandbox."""
        path = self.write(f"recipe-{len(self.procs)}.sh", script, executable=True)
        return self.start(["bash", str(path)], **env)

    def leftovers(self) -> list[tuple[int, str]]:
        found = tagged(self.token)
        if found is None:
            pytest.skip("no /proc: cannot look for leftover processes on this system")
        return found

    def no_leftovers(self, timeout: float = 30.0) -> None:
        """Wait until nothing this sandbox started runs any more (a process that was just sent
        SIGTERM may take a moment to die)."""
        wait_until(lambda: not self.leftovers(), what="no process left behind", timeout=timeout)

    def close(self) -> None:
        for proc in self.procs:
            if proc.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.proc.pid, 9)
                proc.proc.wait()
        kill_tagged(self.token)


def needs(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the recipe needs {', '.join(missing)}, which is not installed here")


@pytest.fixture
def sandbox(shared_server: LiveServer, tmp_path: Path) -> Iterator[Sandbox]:
    """A sandbox on the module's shared server."""
    with contextlib.closing(Sandbox(shared_server, tmp_path / "sandbox")) as box:
        yield box


@pytest.fixture
def own_sandbox(live_server: LiveServer, tmp_path: Path) -> Iterator[Sandbox]:
    """A sandbox on a server of the test's own (SQLite and PostgreSQL), free to restart."""
    with contextlib.closing(Sandbox(live_server, tmp_path / "sandbox")) as box:
        yield box


def split_commands(text: str) -> list[str]:
    """The snippet as the commands a person would type one after another: lines are joined
    until ``bash -n`` accepts them (so a multi-line ``if``/``case``/``\\`` is one command)."""
    commands: list[str] = []
    pending: list[str] = []
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending.append(line)
        chunk = "\n".join(pending)
        if chunk.rstrip().endswith("\\"):
            continue
        check = subprocess.run(["bash", "-n"], input=chunk, text=True, capture_output=True)
        if check.returncode == 0:
            commands.append(chunk)
            pending = []
    assert not pending, f"incomplete shell command at the end of the snippet: {pending!r}"
    return commands


class Session:
    """One ``bash`` reading commands as a person types them: each command is sent when the
    previous one has finished (its exit status is collected), a command ending in ``&`` is
    left running in the background. ``close()`` ends the session and everything it started."""

    _MARK = "__recipe_session_done__"

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self._shell = Proc(
            ["bash", "--norc", "--noprofile"], cwd=cwd, env=env, stdin=subprocess.PIPE
        )
        self.proc = self._shell.proc
        self.token = env[TOKEN_VARIABLE]
        self._sent = 0
        self.statuses: list[tuple[str, int]] = []

    @property
    def stdout(self) -> str:
        return self._shell.stdout

    @property
    def stderr(self) -> str:
        return self._shell.stderr

    def type(self, command: str, *, timeout: float = 120.0) -> int:
        """Send one command and wait for it to finish; its exit status."""
        assert self.proc.stdin is not None
        self._sent += 1
        mark = f"{self._MARK} {self._sent} "
        self.proc.stdin.write(f"{command}\nprintf '\\n%s%s\\n' '{mark}' \"$?\"\n".encode())
        self.proc.stdin.flush()
        found = wait_until(
            lambda: mark in self.stdout, what=f"the command {command!r} to finish", timeout=timeout
        )
        assert found
        tail = self.stdout.split(mark, 1)[1]
        status = int(tail.split("\n", 1)[0])
        self.statuses.append((command, status))
        return status

    def output(self) -> str:
        return f"statuses: {self.statuses}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()
        kill_tagged(self.token)
