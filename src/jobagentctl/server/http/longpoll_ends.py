"""When long-polls that find nothing answer: on time, yet never a whole fleet in one instant."""

from __future__ import annotations

import math
import random
import time

__all__ = ["ENDS_PER_SECOND", "LongPollEnds"]

# How many long-polls that found nothing may answer in one second before later ones are held:
# each is answered and, by its agent, polled again, a claim and two queries (~1–3 ms of server
# CPU on this project's 2-core machine, docs/reliability.md).
ENDS_PER_SECOND = 200


class LongPollEnds:
    """When long-polls that find nothing answer 204: after their wait, and no more than
    ``ENDS_PER_SECOND`` of them in any second. A later one is held a little longer, up to a quarter
    of its wait. Else a fleet that reconnected together (after a restart) would answer and poll
    again in the same instant. It would do so every wait, for as long as it runs. That is thousands
    of requests at once, each a claim. An enqueue or another agent's heartbeat would wait behind
    them. Spread once, the polls stay spread and end on time."""

    _BUCKET = 0.1  # seconds

    def __init__(self) -> None:
        self._ends: dict[int, int] = {}  # bucket → long-polls ending in it

    def deadline(self, wait: float) -> float:
        """The monotonic time at which a long-poll of ``wait`` seconds begun now answers."""
        now = time.monotonic()
        first = math.ceil((now + wait) / self._BUCKET)
        last = math.floor((now + wait * 1.25) / self._BUCKET)
        room = max(1, round(ENDS_PER_SECOND * self._BUCKET))
        if len(self._ends) > 4 * (last - first + 10):
            past = math.floor(now / self._BUCKET)
            self._ends = {b: n for b, n in self._ends.items() if b >= past}
        bucket = next((b for b in range(first, last + 1) if self._ends.get(b, 0) < room), None)
        if bucket is None:  # more than the allowance within the whole quarter: spread over it
            return now + wait * (1 + random.uniform(0, 0.25))
        self._ends[bucket] = self._ends.get(bucket, 0) + 1
        if bucket == first:  # room in the first bucket: on time, not rounded up to its edge
            return now + wait
        return max(now + wait, (bucket - random.random()) * self._BUCKET)
