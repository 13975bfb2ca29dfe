"""The server process's garbage collector, set for a heap of thousands of connections.

CPython starts a young collection when the tracked objects made since the last one, less those
freed since (of any age), pass a threshold. A server holding thousands of agents frees old
objects (a long-poll's, a kept connection's) about as fast as it makes new ones. So that count
hardly moves, and the youngest generation goes uncollected for many seconds while every object
made since and still alive piles up in it. With 10,000 agents over TLS: 440,000 to 640,000
objects, traversed in one pause of 390 to 670 ms, the tail of every request in flight
(docs/benchmarks.md, "The collector on a clock": `benchmarks.fleet --gc threshold`).

So the server collects on a clock instead (:class:`Collector`): the youngest generation every
``YOUNG_SECONDS``, the middle one every ``MIDDLE_EVERY`` ticks. A collection then traverses what
one tick made and kept, a few thousand objects. On the middle generation's ticks the oldest one is
collected too when the interpreter's memory blocks have grown by ``OLD_GROWTH`` since the last
time. That bounds cyclic garbage that grew old, and a settled fleet whose objects die by
reference counting pays for no full collection. The blocks are counted in well under a millisecond;
counting the oldest generation's objects would walk them all (150 ms at 10,000 agents).
"""

from __future__ import annotations

import asyncio
import gc
import sys

__all__ = [
    "MIDDLE_EVERY",
    "OLD_GROWTH",
    "YOUNG_SECONDS",
    "YOUNG_THRESHOLD",
    "Collector",
    "settle_heap",
]

# The clock. A young collection every this many seconds; 0 keeps CPython's own trigger with
# YOUNG_THRESHOLD (the A/B of benchmarks.fleet --gc threshold).
YOUNG_SECONDS = 0.1
# The middle generation every this many ticks (1 s)…
MIDDLE_EVERY = 10
# … and the oldest too once the memory blocks in use are this many times what they were after
# the last full collection (CPython's own rule is a quarter more objects in the oldest).
OLD_GROWTH = 1.25

# With the clock off: a young collection every this many allocations (CPython's default is
# 700), so that objects living a few milliseconds (a request waiting for the pool) die young.
YOUNG_THRESHOLD = 10_000


def _blocks() -> int:
    """The interpreter's memory blocks in use: objects of all ages, counted without a walk."""
    return sys.getallocatedblocks()


class Collector:
    """The collections of one server process, on the event loop's clock (the module docstring).
    ``start`` turns CPython's own trigger off; ``stop`` turns it back on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float = YOUNG_SECONDS) -> None:
        self._loop = loop
        self.seconds = seconds  # between two ticks
        self._ticks = 0
        self._blocks = 0
        self._handle: asyncio.TimerHandle | None = None
        self.collections = [0, 0, 0]  # by generation, since start

    def start(self) -> None:
        self._blocks = _blocks()
        gc.disable()
        self._handle = self._loop.call_later(self.seconds, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        gc.enable()

    def _tick(self) -> None:
        self._ticks += 1
        generation = self._generation()
        gc.collect(generation)
        if generation == 2:
            self._blocks = _blocks()  # what survived: the next growth's base
        self._handle = self._loop.call_later(self.seconds, self._tick)

    def _generation(self) -> int:
        """The generation this tick collects (it and every younger one)."""
        if self._ticks % MIDDLE_EVERY == 0:
            if _blocks() > self._blocks * OLD_GROWTH:
                self.collections[2] += 1
                return 2
            self.collections[1] += 1
            return 1
        self.collections[0] += 1
        return 0


def settle_heap(loop: asyncio.AbstractEventLoop) -> tuple[int, Collector | None]:
    """Collect once, then freeze what is alive, so that no later collection traverses it. That is
    the modules, the app, the settings and the store: objects that live as long as the process.
    Then collect on ``loop``'s clock (:class:`Collector`), or with ``YOUNG_SECONDS`` 0 make
    CPython's young collections rarer (``YOUNG_THRESHOLD``). Returns the objects frozen and
    the collector started.

    Called once the server has started (``runner.py``). Never call it in a process that goes on to
    do other work: cyclic garbage among frozen objects is only freed by reference counting."""
    gc.collect()
    gc.freeze()
    if YOUNG_SECONDS <= 0:
        _, middle, old = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
        return gc.get_freeze_count(), None
    collector = Collector(loop, YOUNG_SECONDS)
    collector.start()
    return gc.get_freeze_count(), collector
