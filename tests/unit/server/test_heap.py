"""The server's garbage collector on a clock (server/http/heap.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from jobagentctl.server.http import heap
from jobagentctl.server.http.heap import Collector

pytestmark = pytest.mark.anyio

CHURN = 30_000


@pytest.fixture
def collector_settings() -> Iterator[None]:
    """The process's collector as it was, whatever a test does to it."""
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()
    else:
        gc.disable()


def _churn(old: list[list[int]]) -> list[list[int]]:
    """Free one old object for each new one made, as a settled server does: CPython's
    allocation count, which starts its young collections, hardly moves."""
    new = []
    for i in range(len(old)):
        old.pop()
        new.append([i])
    return new


@pytest.mark.usefixtures("collector_settings")
def test_cpythons_trigger_lets_the_youngest_generation_pile_up_under_churn() -> None:
    # Why the clock: the trigger counts objects made less objects freed, so under churn the
    # youngest generation holds every new object however many there are.
    old = [[i] for i in range(CHURN)]
    gc.collect()
    gc.enable()
    gc.set_threshold(heap.YOUNG_THRESHOLD, 10, 10)
    new = _churn(old)
    assert len(gc.get_objects(0)) >= CHURN > heap.YOUNG_THRESHOLD
    assert len(new) == CHURN


@pytest.mark.usefixtures("collector_settings")
async def test_the_clock_empties_the_youngest_generation_whatever_the_count() -> None:
    old = [[i] for i in range(CHURN)]
    gc.collect()
    collector = Collector(asyncio.get_running_loop(), seconds=0.01)
    collector.start()
    try:
        assert not gc.isenabled()  # CPython's own trigger is off while the clock runs
        new = _churn(old)
        assert len(gc.get_objects(0)) >= CHURN
        async with asyncio.timeout(30):
            while collector.collections[0] == 0:
                await asyncio.sleep(0.01)
        assert len(gc.get_objects(0)) < CHURN // 10
        assert len(new) == CHURN
    finally:
        collector.stop()
    assert gc.isenabled()


async def test_each_generation_has_its_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector(asyncio.get_running_loop())
    blocks = [1000]
    monkeypatch.setattr(heap, "_blocks", lambda: blocks[0])
    collector._blocks = blocks[0]

    def turns(ticks: int) -> list[int]:
        out = []
        for _ in range(ticks):
            collector._ticks += 1  # as _tick counts them
            out.append(collector._generation())
        return out

    young = [0] * (heap.MIDDLE_EVERY - 1)
    assert turns(heap.MIDDLE_EVERY) == [*young, 1]
    # The oldest once the blocks in use grew past OLD_GROWTH times the last full collection's.
    blocks[0] = int(1000 * heap.OLD_GROWTH)
    assert turns(heap.MIDDLE_EVERY) == [*young, 1]
    blocks[0] += 1
    assert turns(heap.MIDDLE_EVERY) == [*young, 2]
    assert collector.collections == [3 * len(young), 2, 1]
