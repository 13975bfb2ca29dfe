"""The watchdog with real processes: a supervisor that dies or freezes, a job that double-forks
or turns on its watchdog, a watchdog that is killed.

Every wait is on an event — a pidfd becoming readable, a FIFO the job writes, a line the host
prints — with generous deadlines, so the tests hold with both cores busy. Linux only (pidfd,
/proc, prctl); elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobagentctl.supervisor.process import watchdog as watchdog_module
from jobagentctl.supervisor.process.child import Child, enforcement_window
from jobagentctl.supervisor.process.watchdog import TICK_SECONDS, _boottime, _BootTimer, descendants

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"),
    reason="the watchdog's guarantees (and these tests' pidfds) are Linux's",
)

PATIENCE = 60.0  # the longest any event may take on a loaded machine

# A stand-in supervisor: starts the command under a watchdog with a lease, renews it every
# 0.1 s when asked to, prints what it knows as JSON lines, and what became of the command.
# Every SIGCONT it sends (Child resuming a stopped watchdog) is printed too, with the state the
# target was in just before. WATCHDOG_UNDER_TEST, when set, is the script to start instead of
# watchdog.py (a stub of another platform).
HOST = """
import json, os, signal, sys, time
from pathlib import Path
from jobagentctl.supervisor.process import child as child_module
from jobagentctl.supervisor.process.child import Child
lease, renew, grace = float(sys.argv[1]), sys.argv[2] == "1", float(sys.argv[3])
reason = sys.argv[4]
if os.environ.get("WATCHDOG_UNDER_TEST"):
    child_module._WATCHDOG_SCRIPT = os.environ["WATCHDOG_UNDER_TEST"]
resumed = []
real_kill = os.kill
def kill(pid, signum):
    if signum == signal.SIGCONT:
        try:
            was = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            was = "gone"
        resumed.append({"resumed": pid, "was": was})
    real_kill(pid, signum)
os.kill = kill
deadline = time.monotonic() + lease if lease > 0 else None
child = Child.start(sys.argv[5:], dict(os.environ), capture=reason != "-", lease_deadline=deadline,
                    grace=grace, stop_reason_file=Path(reason) if reason != "-" else None)
print(json.dumps({"leader": child.pid, "watchdog": child.process.pid}), flush=True)
while child.poll() is None:
    while resumed:
        print(json.dumps(resumed.pop(0)), flush=True)
    if renew:
        deadline = time.monotonic() + lease
        child.lease_holds_until(deadline)
    time.sleep(0.1)
child.kill_leftovers()
print(json.dumps({"returncode": child.returncode, "stopped": child.stopped_by_watchdog}),
      flush=True)
"""

# The watchdog as it runs where Linux's extras are missing (docs/run.md, "Where"): no prctl (no
# subreaper, no PDEATHSIG, still dumpable), no /proc to find descendants, no boot-time clock
# and so no timerfd: deadlines on the monotonic clock, sleeps computed from them.
NO_LINUX_EXTRAS = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("watchdog", {path!r})
wd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wd)
class NoPrctl(wd._Prctl):
    def __init__(self):
        self._fn = None
wd._Prctl = NoPrctl
wd.descendants = lambda root: []
wd._CLOCK_BOOTTIME = None
sys.exit(wd.main(sys.argv[1:]))
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


def sleeps(pid: int) -> int:
    """How many times ``pid`` went to sleep (voluntary context switches): its wake-ups."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches for {pid}")


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

    def __init__(
        self,
        tmp_path: Path,
        *,
        job: str,
        lease: float = 600.0,
        renew: bool = False,
        grace: float = 1.0,
        watchdog_script: Path | None = None,
        preexec_fn: Any = None,
    ):
        self.tmp_path = tmp_path
        os.mkfifo(tmp_path / "ready")
        self.reason = tmp_path / "stop-reason"
        env = dict(os.environ)
        if watchdog_script is not None:
            env["WATCHDOG_UNDER_TEST"] = str(watchdog_script)
        self._out = b""
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
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
        first = self.line()
        self.leader, self.watchdog = int(first["leader"]), int(first["watchdog"])
        self.tree = [int(pid) for pid in read_fifo(tmp_path / "ready").split()]

    def line(self, timeout: float = PATIENCE) -> dict[str, Any]:
        """The host's next line (read from the pipe itself, so a wait can time out)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        give_up = time.monotonic() + timeout
        while b"\n" not in self._out:
            left = give_up - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"the host printed nothing in {timeout:.0f}s")
            chunk = os.read(fd, 4096)
            assert chunk, "the host printed nothing more"
            self._out += chunk
        line, self._out = self._out.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result

    def last(self) -> dict[str, Any]:
        """What became of the command (any SIGCONT lines before it are skipped)."""
        while "resumed" in (line := self.line()):
            pass
        return line

    def cleanup(self) -> None:
        # The watchdog too: a failed test may leave it stopped, and nothing would resume it.
        for pid in (self.proc.pid, self.watchdog, self.leader, *self.tree):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.wait(PATIENCE)


StartHost = Callable[..., Host]


@pytest.fixture
def start_host(tmp_path: Path) -> Iterator[StartHost]:
    """Starts a :class:`Host` in ``tmp_path`` (its keywords), cleaned up after the test."""
    started: list[Host] = []

    def start(**kwargs: Any) -> Host:
        host = Host(tmp_path, **kwargs)
        started.append(host)
        return host

    yield start
    for host in started:
        host.cleanup()


def test_the_tree_is_two_sessions_under_the_watchdog(start_host: StartHost) -> None:
    host = start_host(job=TREE)
    leader, background, daemon = host.tree
    assert leader == host.leader
    assert os.getsid(leader) == leader == os.getpgid(background)
    assert os.getsid(daemon) == daemon  # left the job's session and group
    watchdog = host.watchdog
    assert os.getsid(watchdog) == watchdog != leader  # a session of its own, not the job's
    # The watchdog is the subreaper: the orphaned daemon is its child, not init's.
    assert set(host.tree) <= set(descendants(watchdog))


def test_supervisor_sigkilled_the_tree_is_gone_before_the_lease_ends(start_host: StartHost) -> None:
    lease = 30.0
    host = start_host(lease=lease, renew=False, grace=1, job=TREE)
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


def test_supervisor_frozen_the_tree_is_gone_by_the_last_deadline(start_host: StartHost) -> None:
    lease = 3.0
    host = start_host(lease=lease, renew=True, grace=5, job=TREE)
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


def test_a_stopped_job_is_still_stopped_at_the_deadline(start_host: StartHost) -> None:
    # The job freezes its own group: the watchdog (in another group) is not frozen with it.
    job = 'echo "$$" > ready; kill -STOP 0'
    host = start_host(lease=4, renew=False, grace=1, job=job)
    wait_gone(host.tree)
    assert host.last() == {"returncode": -signal.SIGTERM, "stopped": "lease_lost"}


def test_the_job_cannot_signal_its_watchdog_away(start_host: StartHost) -> None:
    names = "TERM INT HUP QUIT USR1 USR2 ALRM TSTP TTIN TTOU PIPE"
    job = (
        f"trap '' TERM; for s in {names}; do kill -$s $PPID; done; "
        # kill 0 reaches the job's own group only (which ignores it), never the watchdog's.
        'kill -TERM 0; kill -STOP $PPID; echo "$$" > ready; exec sleep 1000'
    )
    host = start_host(job=job)
    # SIGSTOP by pid cannot be refused, but the supervisor resumes its watchdog at once. Wait
    # for that event itself: the host's SIGCONT to a watchdog that was stopped ("T"). (Seeing
    # the watchdog not stopped proves nothing: the job's SIGSTOP may not have landed yet, and
    # with the supervisor then killed, nothing would be left to resume it: docs/run.md.)
    resumed = host.line()
    assert resumed == {"resumed": host.watchdog, "was": "T"}
    assert state(host.watchdog) not in ("T", "t")  # SIGCONT acts before kill() returns
    assert alive(host.leader)
    # It still does its job: the supervisor dies, the job goes.
    os.kill(host.proc.pid, signal.SIGKILL)
    wait_gone([host.leader, host.watchdog])


def test_a_killed_watchdog_takes_the_job_leader_with_it(start_host: StartHost) -> None:
    host = start_host(job=TREE)
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
        "from jobagentctl.supervisor.process.child import Child\n"
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


PR_CAPBSET_DROP = 24
CAP_SYS_PTRACE = 19


def _without_cap_sys_ptrace() -> None:
    """(preexec) As root, drop CAP_SYS_PTRACE from the bounding set: the host and all it execs
    (the watchdog, the job) are then root without it, as a same-user non-root job would be."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")


def _yama_scope() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


def test_the_job_cannot_ptrace_its_watchdog(tmp_path: Path, start_host: StartHost) -> None:
    if _yama_scope() >= 1:
        pytest.skip("Yama's ptrace_scope refuses a child's ptrace of its parent anyway")
    # Opening /proc/PID/mem is the ptrace attach check: same user, same capabilities, and the
    # target dumpable (or CAP_SYS_PTRACE). The shell opens it itself (`true` is a builtin);
    # its own background child (dumpable: a plain exec) is the control.
    job = (
        "sleep 1000 & bg=$!; "
        "if true < /proc/$PPID/mem; then w=open; else w=denied; fi 2>/dev/null; "
        "if true < /proc/$bg/mem; then b=open; else b=denied; fi 2>/dev/null; "
        "grep CapEff /proc/self/status > caps; "
        'echo "$w $b" > access; echo "$$ $bg" > ready; wait'
    )
    try:
        start_host(job=job, preexec_fn=_without_cap_sys_ptrace)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop CAP_SYS_PTRACE here: {exc}")
    effective = int((tmp_path / "caps").read_text().split()[1], 16)
    assert not effective & (1 << CAP_SYS_PTRACE), "the job still has CAP_SYS_PTRACE"
    assert (tmp_path / "access").read_text() == "denied open\n"


def test_between_events_the_watchdog_sleeps(start_host: StartHost) -> None:
    # A lease that ends in minutes and nothing happening: no wake-up until then (a timerfd
    # armed for the deadline, not a tick).
    host = start_host(job='echo "$$" > ready; exec sleep 1000')
    before = sleeps(host.watchdog)
    time.sleep(4.0)
    # At most the one sleep it may not have reached yet when we looked (a tick of 0.5 s: 8).
    assert sleeps(host.watchdog) - before <= 1


def test_the_boot_timer_fires_at_its_moment() -> None:
    timer = _BootTimer()
    assert timer.fd is not None, "no CLOCK_BOOTTIME timerfd on this Linux"
    try:
        now = _boottime()
        assert timer.timeout(now + 0.3, now) is None  # armed: sleep until the fd is readable
        assert select.select([timer.fd], [], [], 0.1)[0] == []
        assert select.select([timer.fd], [], [], PATIENCE)[0] == [timer.fd]
        assert _boottime() >= now + 0.3
        timer.fired()
        assert timer.timeout(None, _boottime()) is None  # disarmed: no deadline, no wake-up
        assert select.select([timer.fd], [], [], 0.5)[0] == []
    finally:
        os.close(timer.fd)


def test_without_a_boot_timer_sleeps_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    timer = _BootTimer()
    if timer.fd is not None:
        os.close(timer.fd)
    timer.fd = None  # e.g. a kernel without timerfd: a boot-time clock, no timer on it
    assert timer.timeout(100.0 + 30, 100.0) == TICK_SECONDS  # a suspend noticed within a tick
    assert timer.timeout(100.0 + 0.1, 100.0) == pytest.approx(0.1)
    assert timer.timeout(None, 100.0) is None
    monkeypatch.setattr(watchdog_module, "_CLOCK_BOOTTIME", None)  # one clock for both
    assert timer.timeout(100.0 + 30, 100.0) == pytest.approx(30)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """The watchdog script with Linux's extras stubbed away (NO_LINUX_EXTRAS)."""
    script = tmp_path / "watchdog_elsewhere.py"
    script.write_text(NO_LINUX_EXTRAS.format(path=watchdog_module.__file__))
    return script


def test_without_linux_extras_the_group_is_still_stopped_at_the_deadline(
    start_host: StartHost, elsewhere: Path
) -> None:
    lease = 4.0
    began = time.monotonic()
    host = start_host(lease=lease, renew=False, grace=1, job=TREE, watchdog_script=elsewhere)
    started = time.monotonic()
    leader, background, daemon = host.tree
    seen = wait_gone([leader, background])
    assert min(seen.values()) > began + enforcement_window(lease, 0, 1)[0] - 0.5
    assert max(seen.values()) < started + lease + 1.0  # headroom: the test's own wake-up
    assert host.last() == {"returncode": -signal.SIGKILL, "stopped": "lease_lost"}
    assert host.reason.read_text() == "lease_lost\n"
    # What the platform table says such a system loses: the daemon left the group, and with
    # no subreaper (nor /proc) the watchdog neither has it nor can find it.
    assert alive(daemon)


def test_without_linux_extras_the_group_is_still_stopped_when_the_supervisor_dies(
    start_host: StartHost, elsewhere: Path
) -> None:
    host = start_host(job=TREE, watchdog_script=elsewhere)
    leader, background, daemon = host.tree
    killed = time.monotonic()
    os.kill(host.proc.pid, signal.SIGKILL)
    seen = wait_gone([leader, background])
    # The stop signal at once (ignored), SIGKILL after the grace: nowhere near the lease.
    assert max(seen.values()) < killed + 1 + PATIENCE / 2
    assert host.reason.read_text() == "lease_lost\n"
    wait_gone([host.watchdog])
    assert alive(daemon)  # escaped, as above


# A supervisor that freezes (SIGSTOP of itself) the moment the watchdog first has something to
# say, i.e. before it has read "started": the lease it was given must hold all the same.
FROZEN_AT_START = """
import os, signal, sys, time
from jobagentctl.supervisor.process.child import Child
read_line = Child._read_line
def frozen(self):
    os.kill(os.getpid(), signal.SIGSTOP)
    return read_line(self)
Child._read_line = frozen
lease = float(sys.argv[1])
child = Child.start(sys.argv[2:], dict(os.environ), capture=False,
                    lease_deadline=time.monotonic() + lease, grace=1)
"""


def test_a_supervisor_frozen_while_the_job_starts_has_its_lease_enforced(tmp_path: Path) -> None:
    lease = 3.0
    os.mkfifo(tmp_path / "ready")
    began = time.monotonic()
    host = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FROZEN_AT_START,
            str(lease),
            "sh",
            "-c",
            "echo $$ > ready; exec sleep 1000",
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        leader = int(read_fifo(tmp_path / "ready"))
        seen = wait_gone([leader])
        assert state(host.pid) == "T"  # it never got to hear that the command started
        assert seen[leader] < began + lease + 1.0  # headroom: the test's own wake-up
    finally:
        with contextlib.suppress(OSError):
            os.killpg(host.pid, signal.SIGKILL)
        host.wait(PATIENCE)
