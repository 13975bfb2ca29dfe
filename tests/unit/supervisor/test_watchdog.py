"""The watchdog with real processes: a supervisor that dies or freezes, a job that double-forks
or turns on its watchdog, a watchdog that is killed (issue 13).

Every wait is on an event — a pidfd becoming readable, a FIFO the job writes, a line the host
prints — with generous deadlines, so the tests hold with both cores busy. Linux only (pidfd,
/proc, prctl); elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobagentctl.supervisor.child import Child, enforcement_window
from jobagentctl.supervisor.watchdog import descendants

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"),
    reason="the watchdog's guarantees (and these tests' pidfds) are Linux's",
)

PATIENCE = 60.0  # the longest any event may take on a loaded machine

# A stand-in supervisor: starts the command under a watchdog with a lease, renews it every
# 0.1 s when asked to, prints what it knows as JSON lines, and what became of the command.
HOST = """
import json, os, sys, time
from pathlib import Path
from jobagentctl.supervisor.child import Child
lease, renew, grace = float(sys.argv[1]), sys.argv[2] == "1", float(sys.argv[3])
reason = sys.argv[4]
deadline = time.monotonic() + lease if lease > 0 else None
child = Child.start(sys.argv[5:], dict(os.environ), capture=reason != "-", lease_deadline=deadline,
                    grace=grace, stop_reason_file=Path(reason) if reason != "-" else None)
print(json.dumps({"leader": child.pid, "watchdog": child.process.pid}), flush=True)
while child.poll() is None:
    if renew:
        deadline = time.monotonic() + lease
        child.lease_holds_until(deadline)
    time.sleep(0.1)
child.kill_leftovers()
print(json.dumps({"returncode": child.returncode, "stopped": child.stopped_by_watchdog}),
      flush=True)
"""

# The job: a background child in its group, a daemon that double-forks out of the group and
# session, and itself ignoring SIGTERM (as do its children), so only SIGKILL ends the tree.
# It tells the test every pid through the FIFO, then waits.
TREE = """
trap '' TERM
sleep 1000 & bg=$!
( setsid sh -c 'echo $$ > daemon.pid; exec sleep 1000' & )
while [ ! -s daemon.pid ]; do sleep 0.01; done
echo "$$ $bg $(cat daemon.pid)" > ready
wait
"""


def wait_gone(pids: list[int], timeout: float = PATIENCE) -> dict[int, float]:
    """Wait until every pid has exited (pidfds); when each was seen gone (monotonic)."""
    fds: dict[int, int] = {}
    seen: dict[int, float] = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            seen[pid] = time.monotonic()
    try:
        give_up = time.monotonic() + timeout
        while fds:
            left = give_up - time.monotonic()
            if left <= 0:
                raise AssertionError(f"still alive after {timeout:.0f}s: {sorted(fds.values())}")
            for fd in select.select(list(fds), [], [], left)[0]:
                seen[fds.pop(fd)] = time.monotonic()
                os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)
    return seen


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def read_fifo(path: Path, timeout: float = PATIENCE) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = b""
        give_up = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            left = give_up - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"nothing from the job on {path.name} in {timeout:.0f}s")
            chunk = os.read(fd, 4096)
            if not chunk:
                time.sleep(0.01)  # no writer yet: a FIFO opened early reads EOF
            data += chunk
        return data.decode()
    finally:
        os.close(fd)


class Host:
    """The stand-in supervisor process, and the job's tree once it reported ready."""

    def __init__(self, tmp_path: Path, *, lease: float, renew: bool, grace: float, job: str):
        self.tmp_path = tmp_path
        os.mkfifo(tmp_path / "ready")
        self.reason = tmp_path / "stop-reason"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                HOST,
                str(lease),
                "1" if renew else "0",
                str(grace),
                str(self.reason),
                "sh",
                "-c",
                job,
            ],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        first = json.loads(self.proc.stdout.readline())
        self.leader, self.watchdog = int(first["leader"]), int(first["watchdog"])
        self.tree = [int(pid) for pid in read_fifo(tmp_path / "ready").split()]

    def last(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the host printed nothing more"
        result: dict[str, Any] = json.loads(line)
        return result

    def cleanup(self) -> None:
        # The watchdog too: a failed test may leave it stopped, and nothing would resume it.
        for pid in (self.proc.pid, self.watchdog, self.leader, *self.tree):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.wait(PATIENCE)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    started: list[Host] = []
    yield started
    for host in started:
        host.cleanup()


def test_the_tree_is_two_sessions_under_the_watchdog(tmp_path: Path, hosts: list[Host]) -> None:
    host = Host(tmp_path, lease=600, renew=False, grace=1, job=TREE)
    hosts.append(host)
    leader, background, daemon = host.tree
    assert leader == host.leader
    assert os.getsid(leader) == leader == os.getpgid(background)
    assert os.getsid(daemon) == daemon  # left the job's session and group
    watchdog = host.watchdog
    assert os.getsid(watchdog) == watchdog != leader  # a session of its own, not the job's
    # The watchdog is the subreaper: the orphaned daemon is its child, not init's.
    assert set(host.tree) <= set(descendants(watchdog))


def test_supervisor_sigkilled_the_tree_is_gone_before_the_lease_ends(
    tmp_path: Path, hosts: list[Host]
) -> None:
    lease = 30.0
    host = Host(tmp_path, lease=lease, renew=False, grace=1, job=TREE)
    hosts.append(host)
    started = time.monotonic()
    os.kill(host.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    seen = wait_gone(host.tree, timeout=lease)
    # SIGKILL comes after the grace (1 s; everything ignores SIGTERM) and long before the
    # lease would end: the supervisor is gone, so the job is stopped at once.
    assert max(seen.values()) < started + enforcement_window(lease, 0, 1)[1]
    assert max(seen.values()) >= killed
    assert host.reason.read_text() == "lease_lost\n"
    wait_gone([host.watchdog])  # and then it exits


def test_supervisor_frozen_the_tree_is_gone_by_the_last_deadline(
    tmp_path: Path, hosts: list[Host]
) -> None:
    lease = 3.0
    host = Host(tmp_path, lease=lease, renew=True, grace=5, job=TREE)
    hosts.append(host)
    # Renewals keep it alive well past one lease …
    time.sleep(lease * 1.5)
    assert all(alive(pid) for pid in host.tree)
    # … until the supervisor freezes: then the last deadline it sent (≤ now + lease) holds.
    os.kill(host.proc.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        seen = wait_gone(host.tree)
        assert max(seen.values()) < frozen + lease + 1.0  # headroom: the test's own wake-up
        assert min(seen.values()) > frozen + enforcement_window(lease, 0, 5)[0] - 0.5
        assert host.reason.read_text() == "lease_lost\n"
    finally:
        os.kill(host.proc.pid, signal.SIGCONT)
    # Thawed, the supervisor learns what happened: killed (SIGTERM was ignored), by the watchdog.
    assert host.last() == {"returncode": -signal.SIGKILL, "stopped": "lease_lost"}
    assert host.proc.wait(PATIENCE) == 0


def test_a_stopped_job_is_still_stopped_at_the_deadline(tmp_path: Path, hosts: list[Host]) -> None:
    # The job freezes its own group: the watchdog (in another group) is not frozen with it.
    job = 'echo "$$" > ready; kill -STOP 0'
    host = Host(tmp_path, lease=4, renew=False, grace=1, job=job)
    hosts.append(host)
    wait_gone(host.tree)
    assert host.last() == {"returncode": -signal.SIGTERM, "stopped": "lease_lost"}


def test_the_job_cannot_signal_its_watchdog_away(tmp_path: Path, hosts: list[Host]) -> None:
    names = "TERM INT HUP QUIT USR1 USR2 ALRM TSTP TTIN TTOU PIPE"
    job = (
        f"trap '' TERM; for s in {names}; do kill -$s $PPID; done; "
        # kill 0 reaches the job's own group only (which ignores it), never the watchdog's.
        'kill -TERM 0; kill -STOP $PPID; echo "$$" > ready; exec sleep 1000'
    )
    host = Host(tmp_path, lease=600, renew=False, grace=1, job=job)
    hosts.append(host)
    # SIGSTOP by pid cannot be refused, but the supervisor resumes its watchdog at once.
    give_up = time.monotonic() + PATIENCE
    while state(host.watchdog) == "T":
        assert time.monotonic() < give_up, "the watchdog stayed stopped"
        time.sleep(0.05)
    assert alive(host.watchdog)
    assert alive(host.leader)
    # It still does its job: the supervisor dies, the job goes.
    os.kill(host.proc.pid, signal.SIGKILL)
    wait_gone([host.leader, host.watchdog])


def test_a_killed_watchdog_takes_the_job_leader_with_it(tmp_path: Path, hosts: list[Host]) -> None:
    host = Host(tmp_path, lease=600, renew=False, grace=1, job=TREE)
    hosts.append(host)
    # The supervisor frozen, so that only the kernel can act: PR_SET_PDEATHSIG.
    os.kill(host.proc.pid, signal.SIGSTOP)
    try:
        os.kill(host.watchdog, signal.SIGKILL)
        wait_gone([host.leader])
    finally:
        os.kill(host.proc.pid, signal.SIGCONT)
    # The supervisor notices and kills the rest of the group.
    _, background, _ = host.tree
    wait_gone([background])
    assert host.last() == {"returncode": -signal.SIGKILL, "stopped": None}


@pytest.mark.parametrize("watchdog", [True, False])
def test_a_double_forked_daemon_is_killed_when_the_job_ends(tmp_path: Path, watchdog: bool) -> None:
    pid_file = tmp_path / "daemon.pid"
    job = f"( setsid sh -c 'echo $$ > {pid_file}; exec sleep 1000' & ); "
    job += f"while [ ! -s {pid_file} ]; do sleep 0.01; done; exit 3"
    child = Child.start(["sh", "-c", job], dict(os.environ), capture=False, watchdog=watchdog)
    try:
        assert child.wait(PATIENCE) == 3
        daemon = int(pid_file.read_text())
        child.kill_leftovers()
        if watchdog:
            wait_gone([daemon])
        else:
            assert alive(daemon)  # what the watchdog is for: it escaped the group
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_output_exit_status_and_signals_are_relayed_as_before() -> None:
    child = Child.start(
        ["sh", "-c", "printf 'out\\000'; printf err >&2; kill -USR1 $$"],
        dict(os.environ),
        capture=True,
    )
    assert child.stdout_fd is not None and child.stderr_fd is not None
    out, err = b"", b""
    for fd in (child.stdout_fd, child.stderr_fd):
        while chunk := os.read(fd, 4096):
            if fd == child.stdout_fd:
                out += chunk
            else:
                err += chunk
        os.close(fd)
    # EOF came from the job's side: the watchdog holds no copy of the pipes.
    assert (out, err) == (b"out\0", b"err")
    child.wait(PATIENCE)
    assert child.returncode == -signal.SIGUSR1
    child.kill_leftovers()
    assert child.process.returncode == 0


def test_stdin_passes_through_and_no_capture_output_is_ours(tmp_path: Path) -> None:
    script = (
        "import os, sys\n"
        "from jobagentctl.supervisor.child import Child\n"
        "c = Child.start(['sh', '-c', 'cat; echo done; exit 4'], dict(os.environ), capture=False)\n"
        "sys.exit(c.wait(60))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=b"hello\n",
        capture_output=True,
        timeout=PATIENCE,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (4, b"hello\ndone\n"), proc.stderr
