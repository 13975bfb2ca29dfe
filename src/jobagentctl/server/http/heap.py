"""The server process's garbage collector, set for a heap of thousands of connections.

CPython starts a young collection when the tracked objects made since the last one, less those
freed since (of any age), pass a threshold. A server holding thousands of agents frees old
objects (a long-poll's, a kept connection's) about as fast as it makes new ones. So that count
hardly moves, and the youngest generation goes uncollected for many seconds while every object
made since and still alive piles up in it. With 10,000 agents over TLS: 440,000 to 640,000
objects, traversed in one pause of 390 to 670 ms, the tail of every request in flight
(docs/benchmarks.md, "Fleet": `benchmarks.fleet --gc threshold`).

So the server collects on a clock instead (:class:`Collector`): the youngest generation every
``YOUNG_SECONDS``, the middle one every ``MIDDLE_EVERY`` ticks. A collection then traverses what
one tick made and kept, a few thousand objects. The oldest generation is collected when it
has grown by ``OLD_GROWTH`` since the last time (looked at every ``OLD_EVERY`` ticks). That is
CPython's own rule for it: it bounds cyclic garbage that grew old, and a fleet whose objects die
by reference counting never pays for a full collection.
"""

from __future__ import annotations

import asyncio
import gc

__all__ = [
    "MIDDLE_EVERY",
    "OLD_EVERY",
    "OLD_GROWTH",
    "YOUNG_SECONDS",
    "YOUNG_THRESHOLD",
    "Collector",
    "settle_heap",
]

# The clock. A young collection every this many seconds; 0 keeps CPython's own trigger with
# YOUNG_THRESHOLD (the A/B of benchmarks.fleet --gc threshold).
YOUNG_SECONDS = 0.1
# The middle generation every this many ticks (1 s).
MIDDLE_EVERY = 10
# The oldest generation's size looked at every this many ticks (10 s)…
OLD_EVERY = 100
# … and collected once it is this many times its size after the last full collection.
OLD_GROWTH = 1.25
# Below this size the oldest generation is not collected at all (a small heap costs little to
# keep, and a server that has just started would otherwise collect it again and again).
OLD_FLOOR = 100_000

# With the clock off: a young collection every this many allocations (CPython's default is
# 700), so that objects living a few milliseconds (a request waiting for the pool) die young.
YOUNG_THRESHOLD = 10_000


def _oldest_size() -> int:
    """The objects in the oldest generation (the frozen ones are not in it)."""
    return len(gc.get_objects(2))


class Collector:
    """The collections of one server process, on the event loop's clock (the module docstring).
    ``start`` turns CPython's own trigger off; ``stop`` turns it back on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float = YOUNG_SECONDS) -> None:
        self._loop = loop
        self._seconds = seconds
        self._ticks = 0
        self._old_size = 0
        self._handle: asyncio.TimerHandle | None = None
        self.collections = [0, 0, 0]  # by generation, since start

    def start(self) -> None:
        self._old_size = _oldest_size()
        gc.disable()
        self._handle = self._loop.call_later(self._seconds, self._tick)

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
            self._old_size = _oldest_size()  # what survived: the next growth's base
        self._handle = self._loop.call_later(self._seconds, self._tick)

    def _generation(self) -> int:
        """The generation this tick collects (it and every younger one)."""
        if self._ticks % OLD_EVERY == 0:
            size = _oldest_size()
            if size > max(OLD_FLOOR, self._old_size * OLD_GROWTH):
                self.collections[2] += 1
                return 2
        if self._ticks % MIDDLE_EVERY == 0:
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
