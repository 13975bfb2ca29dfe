"""What the watchdog costs: start-up per job, its own CPU and memory (docs/reliability.md §8).

    python -m tools.chaos.watchdog_cost [--rounds 30] [--seconds 60]

1. Start-up: ``Child.start(["true"])`` until its exit status is known, with the watchdog and
   without (``watchdog=False``: the command straight under `run`, as before), interleaved,
   median of ``--rounds``. And the two ways the helper could be started: the stdlib-only
   script (``python -I -S watchdog.py``, what ``Child`` does) against importing the
   package (what ``python -m jobagentctl.supervisor.process.watchdog`` would pay first).
2. Supervision: ``sleep SECONDS`` under the watchdog with a lease of 15 s renewed every 5 s
   (``run``'s heartbeat cadence for that lease); the watchdog's CPU over the wall time (from
   /proc/PID/schedstat, in nanoseconds; clock ticks where it is missing), split into its
   start-up (until the command runs) and the rest, its wake-ups (voluntary context switches:
   every sleep it wakes from, independent of the machine's load) and its peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from jobagentctl.supervisor.process.child import _WATCHDOG_SCRIPT, Child


def _start_once(watchdog: bool) -> float:
    t0 = time.perf_counter()
    child = Child.start(["true"], dict(os.environ), capture=True, watchdog=watchdog)
    child.wait(60)
    elapsed = time.perf_counter() - t0
    for fd in (child.stdout_fd, child.stderr_fd):
        if fd is not None:
            os.close(fd)
    child.kill_leftovers()
    return elapsed


def _process(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=False, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def startup(rounds: int) -> None:
    with_wd: list[float] = []
    without: list[float] = []
    script: list[float] = []
    package: list[float] = []
    bare: list[float] = []
    for _ in range(rounds):
        with_wd.append(_start_once(True))
        without.append(_start_once(False))
        script.append(_process([sys.executable, "-I", "-S", _WATCHDOG_SCRIPT]))
        package.append(_process([sys.executable, "-c", "import jobagentctl.supervisor"]))
        bare.append(_process([sys.executable, "-I", "-S", "-c", "pass"]))
    med = statistics.median
    print(f"start + exit of `true`, median of {rounds}:")
    print(f"  with the watchdog     {med(with_wd) * 1000:7.1f} ms")
    print(f"  without (direct)      {med(without) * 1000:7.1f} ms")
    print(f"  added per job         {(med(with_wd) - med(without)) * 1000:7.1f} ms")
    print("how the helper starts, median whole process:")
    print(f"  python -I -S watchdog.py (usage error, no job)   {med(script) * 1000:7.1f} ms")
    print(f"  python -c 'import jobagentctl.supervisor'         {med(package) * 1000:7.1f} ms")
    print(f"  python -I -S -c pass                              {med(bare) * 1000:7.1f} ms")


def _stat(pid: int) -> tuple[float, int, int]:
    """CPU seconds (user + system), peak RSS in KiB and voluntary context switches of ``pid``."""
    try:
        cpu = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    hwm = switches = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
        elif line.startswith("voluntary_ctxt_switches:"):
            switches = int(line.split()[1])
    return cpu, hwm, switches


def supervision(seconds: float) -> None:
    lease = 15.0
    t0 = time.monotonic()
    child = Child.start(
        ["sleep", str(seconds)], dict(os.environ), capture=False, lease_deadline=t0 + lease
    )
    watchdog = child.process.pid
    started = sampled = time.monotonic()
    first_cpu, hwm, first_switches = _stat(watchdog)
    cpu, switches = first_cpu, first_switches
    while child.poll() is None:
        child.lease_holds_until(time.monotonic() + lease)
        cpu, hwm, switches = _stat(watchdog)
        sampled = time.monotonic()
        time.sleep(5.0)
    wall, idle = sampled - t0, sampled - started  # up to the last sample
    child.kill_leftovers()
    rest, wakeups = cpu - first_cpu, switches - first_switches
    print(f"watchdog over {wall:.0f} s of `sleep` (lease {lease:.0f} s renewed every 5 s):")
    print(f"  CPU {cpu:.3f} s = {cpu / wall * 100:.3f} % of a core; peak RSS {hwm / 1024:.1f} MB")
    print(f"  of which start-up (until the command ran) {first_cpu * 1000:.1f} ms")
    print(
        f"  after it: {rest * 1000:.2f} ms over {idle:.0f} s = {rest / idle * 100:.4f} % of a "
        f"core; {wakeups} wake-ups = {wakeups / idle * 60:.0f} per minute"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos.watchdog_cost")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    startup(args.rounds)
    supervision(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
