"""The one retry policy of `run`: jittered exponential backoff within a time budget.

The claim (with ``--loop``), the final report, the release after an interrupt and the heartbeats all
retry with it. Each caller decides only which errors are worth another try.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

__all__ = ["Retry", "backoff_delay"]


def backoff_delay(failures: int, base: float, cap: float, rng: random.Random) -> float:
    """Delay before retry number ``failures`` (≥ 1): ``base`` doubling, capped, jittered to
    50–100 % so a fleet that failed together does not retry in step."""
    capped = min(cap, base * 2.0 ** min(failures - 1, 16))
    return capped * rng.uniform(0.5, 1.0)


class Retry:
    """Counts failures in a row and says how long to wait before the next try, if any."""

    def __init__(
        self,
        *,
        base: float,
        cap: float,
        rng: random.Random,
        budget: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng
        self._clock = clock
        self.deadline = clock() + budget

    def failed(self) -> float | None:
        """One more failure: the delay before the next try, or None when waiting it would
        pass the budget (give up)."""
        self.failures += 1
        delay = backoff_delay(self.failures, self.base, self.cap, self._rng)
        if self._clock() + delay > self.deadline:
            return None
        return delay

    def succeeded(self) -> None:
        """A try succeeded: the next failure starts the backoff afresh."""
        self.failures = 0
