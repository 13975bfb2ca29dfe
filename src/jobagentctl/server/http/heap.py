"""The server process's garbage collector, set for a heap of thousands of connections."""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "settle_heap"]

# A young collection every this many allocations (CPython's default is 700). A server holding
# thousands of agents allocates fast; at 700, every object living a few milliseconds (a request
# waiting for the pool, a long-poll) survived two young collections and was promoted to the
# oldest generation, which then filled a quarter past its size and was traversed whole:
# pauses of up to 0.8 s with 10,000 agents, each one the tail of every request in flight
# (docs/benchmarks.md, "Fleet": `benchmarks.fleet --gc cpython`). At 10,000, few of those
# objects outlive their young generation.
YOUNG_THRESHOLD = 10_000


def settle_heap() -> int:
    """Collect once, then freeze what is alive, so that no later collection traverses it. That is
    the modules, the app, the settings and the store: objects that live as long as the process. Then
    make young collections rarer (``YOUNG_THRESHOLD``). Returns the objects frozen.

    Called once the server has started (``runner.py``). Never call it in a process that goes on to
    do other work: cyclic garbage among frozen objects is only freed by reference counting."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return gc.get_freeze_count()
