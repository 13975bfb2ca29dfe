"""Figure: a normal client's latency under IDLE idle + SLOW slowloris connections,
each reopened as soon as the server closes it (the attack runs in a child process).

Usage: python -m tests.system.server.flood_connections PORT SERVER_PID [IDLE] [SLOW] [SECONDS]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ARGS = [a for a in sys.argv[1:] if a != "attack"]
PORT, PID = int(ARGS[0]), int(ARGS[1])
IDLE = int(ARGS[2]) if len(ARGS) > 2 else 1100
SLOW = int(ARGS[3]) if len(ARGS) > 3 else 100
SECONDS = float(ARGS[4]) if len(ARGS) > 4 else 30.0
opened = {"idle": 0, "slow": 0}
closed = {"idle": 0, "slow": 0}


def server_cpu() -> float:
    fields = Path(f"/proc/{PID}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_fds() -> int:
    return len(os.listdir(f"/proc/{PID}/fd"))


async def idle() -> None:
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
            opened["idle"] += 1
            await reader.read()  # until the server closes it
            closed["idle"] += 1
            writer.close()
        except OSError:
            await asyncio.sleep(0.1)


async def slow() -> None:
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", PORT)
            opened["slow"] += 1
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ")
            while True:
                writer.write(b"a")
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 1.0) == b"":
                        break
                except TimeoutError:
                    pass
            closed["slow"] += 1
            writer.close()
        except OSError:
            await asyncio.sleep(0.1)


async def attack() -> None:
    tasks = [asyncio.create_task(idle()) for _ in range(IDLE)]
    tasks += [asyncio.create_task(slow()) for _ in range(SLOW)]
    await asyncio.sleep(SECONDS + 5)
    print(f"attacker: opened {opened}, closed by the server {closed}", flush=True)
    os._exit(0)


async def normal(samples: list[tuple[float, bool]]) -> None:
    while True:
        started = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", PORT), 10)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            ok = data.startswith(b"HTTP/1.1 200")
        except (OSError, TimeoutError):
            ok = False
        samples.append((time.perf_counter() - started, ok))
        await asyncio.sleep(0.05)


async def measure() -> None:
    attacker = subprocess.Popen([sys.executable, "-m", __spec__.name, *ARGS, "attack"])
    await asyncio.sleep(4)
    print(f"server fds after ramp-up: {server_fds()}", flush=True)
    cpu0 = server_cpu()
    samples: list[tuple[float, bool]] = []
    task = asyncio.create_task(normal(samples))
    await asyncio.sleep(SECONDS)
    fds, cpu = server_fds(), server_cpu() - cpu0
    task.cancel()
    latencies = sorted(s for s, ok in samples if ok)
    failed = sum(1 for _, ok in samples if not ok)

    def pct(q: float) -> float:
        if not latencies:
            return float("nan")
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    print(
        f"{IDLE} idle + {SLOW} slowloris for {SECONDS:.0f}s: normal client {len(samples)} "
        f"requests, {failed} failed, p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms, "
        f"max {pct(1.0):.1f} ms; server CPU {100 * cpu / SECONDS:.0f} % of a core; fds {fds}"
    )
    attacker.wait()


if __name__ == "__main__":
    asyncio.run(attack() if sys.argv[-1] == "attack" else measure())
