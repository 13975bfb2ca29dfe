"""The garbage collector of a ``jobagentctl server start`` process, seen from outside: with this
directory on ``PYTHONPATH`` (``benchmarks.fleet`` puts it there), the server writes one line per
full collection, and per young one that took over 20 ms, to ``$JOBAGENTCTL_BENCH_GC_LOG``:
``<wall time> <generation> <wall ms> <cpu ms>``, and with ``JOBAGENTCTL_BENCH_GC_SIZES=1`` the
objects in the generations it traversed, counted when it started (a walk of them: it lengthens
every collection, so the fleet's figures are not taken with it). ``JOBAGENTCTL_BENCH_GC`` picks
the server's collector for the A/B of ``server/http/heap.py``: ``cpython`` keeps CPython's
settings (``heap.settle_heap`` does nothing), ``threshold`` freezes the startup objects and
makes CPython's young collections rarer, with no clock (the server before the clock). Any other
process (the load generators) is left alone.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any


def _is_server() -> bool:
    args = sys.argv[1:]
    return any(args[i : i + 2] == ["server", "start"] for i in range(len(args)))


def _log_collections(path: str, sizes: bool) -> None:
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    began: list[float] = [0.0, 0.0]
    objects = [""]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            if sizes:
                counted = sum(len(gc.get_objects(g)) for g in range(info["generation"] + 1))
                objects[0] = f" {counted}"
            began[:] = [time.perf_counter(), time.thread_time()]
            return
        wall = (time.perf_counter() - began[0]) * 1000
        cpu = (time.thread_time() - began[1]) * 1000
        if info["generation"] == 2 or wall > 20:
            out.write(f"{time.time():.3f} {info['generation']} {wall:.1f} {cpu:.1f}{objects[0]}\n")

    gc.callbacks.append(callback)


if _is_server():
    if os.environ.get("JOBAGENTCTL_BENCH_GC_LOG"):
        _log_collections(
            os.environ["JOBAGENTCTL_BENCH_GC_LOG"],
            os.environ.get("JOBAGENTCTL_BENCH_GC_SIZES") == "1",
        )
    if os.environ.get("JOBAGENTCTL_BENCH_GC") == "cpython":
        from jobagentctl.server.http import heap

        heap.settle_heap = lambda loop: (0, None)  # CPython's thresholds, nothing frozen
    elif os.environ.get("JOBAGENTCTL_BENCH_GC") == "threshold":
        from jobagentctl.server.http import heap

        heap.YOUNG_SECONDS = 0.0  # frozen, young collections every heap.YOUNG_THRESHOLD
