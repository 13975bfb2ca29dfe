"""The reaper task: survives database errors, counts what it reaps, stops cleanly."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from jobagentctl.errors import ServerUnavailable
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.reaper import Reaper
from jobagentctl.server.store import ReapResult

pytestmark = pytest.mark.anyio


class FlakyStore:
    """``reap`` fails on the calls listed in ``failures``, then reaps one job per call."""

    def __init__(self, failures: set[int], crash: set[int] | None = None) -> None:
        self.calls = 0
        self.failures = failures
        self.crash = crash or set()
        self.passes = asyncio.Event()

    async def reap(self, batch_size: int, max_reclaims: int, grace: object = None) -> ReapResult:
        self.calls += 1
        if self.calls >= 5:
            self.passes.set()
        if self.calls in self.failures:
            raise ServerUnavailable("database unreachable")
        if self.calls in self.crash:
            raise RuntimeError("a bug")
        return ReapResult(requeued=1, failed=1 if self.calls == 2 else 0)


async def test_reaper_survives_database_errors_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore(failures={1, 3}, crash={4})
    metrics = Metrics()
    reaper = Reaper(store, interval=0.01, batch_size=10, max_reclaims=2, metrics=metrics)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="jobagentctl.server.reaper"):
        reaper.start()
        await asyncio.wait_for(store.passes.wait(), 20)
        await reaper.stop()
    assert store.calls >= 5
    assert reaper.failures == 3
    sample: Any = metrics.registry.get_sample_value
    assert sample("jobagentctl_reaper_errors_total") == 3
    assert sample("jobagentctl_reaped_total", {"outcome": "failed"}) == 1
    assert sample("jobagentctl_reaped_total", {"outcome": "requeued"}) == store.calls - 3
    messages = [r.getMessage() for r in caplog.records]
    assert any("database unreachable" in m for m in messages)
    assert any("reaped 2 expired claim(s): 1 requeued, 1 failed" in m for m in messages)
    # Stopped: no more passes.
    calls = store.calls
    await asyncio.sleep(0.1)
    assert store.calls == calls


async def test_stop_before_start_and_twice() -> None:
    reaper = Reaper(FlakyStore(set()), interval=5, batch_size=1, max_reclaims=0)  # type: ignore[arg-type]
    await reaper.stop()
    reaper.start()
    await reaper.stop()
    await reaper.stop()
