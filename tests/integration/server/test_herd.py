"""The long-poll herd at the service: many long-polls waiting on one agent cost no
claims and no key checks while they wait, an enqueue costs one of each, and long-polls begun
together do not all end together. ``python -m benchmarks.herd`` measures the latencies."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any
from uuid import UUID

import pytest

from jobagentctl.server import service
from jobagentctl.server.http.longpoll_ends import ENDS_PER_SECOND, LongPollEnds
from tests.fixtures.server_app import open_api
from tests.fixtures.waiting import await_until

# Slow: thousands of waiters; `make test-fast` leaves it out, `make test` runs it.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WAITERS = 200


async def test_regression_waiting_long_polls_neither_claim_nor_recheck_the_key(
    database_url: str, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every waiter woke on its 10 s slice, re-checked its key and ran a
    claim, all at the same moment. Now a slice (shortened here to 0.2 s) asks the store only
    "anything queued?"; the key is checked again only before a job is handed out, and one
    enqueue costs one claim however many wait."""
    monkeypatch.setattr(service, "_WAIT_SLICE_SECONDS", 0.2)
    async with open_api(database_url, max_wait_seconds=600) as api:
        agent = await api.agent()
        body = {"waitSeconds": 300, "leaseSeconds": 30}
        polls = [asyncio.ensure_future(api.claim_next(agent, body)) for _ in range(WAITERS)]
        try:

            async def waiting() -> bool:
                text = (await api.client.get("/metrics")).text
                return f"jobagentctl_long_polls_waiting {WAITERS}.0" in text

            await await_until(waiting, what="every long-poll to wait")
            calls: Counter[str] = Counter()
            for name in ("claim_batch", "wait_for_job"):
                _count(api.store, name, calls)
            _count(api.store.entities, "get_api_key", calls)
            await await_until(
                lambda: calls["wait_for_job"] >= 3 * WAITERS, what="three slices each"
            )
            assert calls["claim_batch"] == calls["get_api_key"] == 0, calls
            # Long slices from here on: a re-check that finds the job queued before the woken
            # waiter has claimed it would claim as well (and find nothing) — rare with the real
            # slice, not with this one. Every waiter starts one more wait.
            monkeypatch.setattr(service, "_WAIT_SLICE_SECONDS", 600.0)
            started = calls["wait_for_job"]
            await await_until(
                lambda: calls["wait_for_job"] >= started + WAITERS, what="a long slice each"
            )

            job = await api.enqueue(agent)  # its own request's key lookup: one
            done, _ = await asyncio.wait(polls, timeout=60, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            claimed = done.pop().result()
            assert claimed.status_code == 200 and claimed.json()["id"] == job["id"]
            assert calls["claim_batch"] == 1, calls
            assert calls["get_api_key"] == 2, calls  # the enqueue's and the hand-out's
        finally:
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)


def _count(store: Any, name: str, calls: Counter[str]) -> None:
    method = getattr(store, name)

    async def counting(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return await method(*args, **kwargs)

    setattr(store, name, counting)


def test_long_polls_begun_together_do_not_end_together() -> None:
    """A fleet reconnecting at once: at most ``ENDS_PER_SECOND`` of its long-polls end in any
    second, none before its wait and none later than a quarter after it; a long-poll alone
    ends on time."""
    ends = LongPollEnds()
    began = time.monotonic()
    deadlines = [ends.deadline(30.0) for _ in range(2000)]
    assert all(began + 30 <= d <= time.monotonic() + 30 * 1.25 for d in deadlines)
    per_second = Counter(int(d - began) for d in deadlines)
    # 1,500 within the allowance (200 a second over 7.5 s), the rest spread over the same span.
    assert max(per_second.values()) <= 2 * ENDS_PER_SECOND, per_second
    assert len(per_second) >= 7, per_second

    alone = LongPollEnds()
    before = time.monotonic()
    deadline = alone.deadline(30.0)
    after = time.monotonic()
    # Bracketed by the clock around the call, not a tolerance: a busy machine may pause us.
    assert before + 30.0 <= deadline <= after + 30.0


async def test_regression_an_empty_long_poll_costs_one_statement(
    database_url: str, anyio_backend: str
) -> None:
    """An empty long-poll asked the database three times: its claim attempt, "anything
    queued?" after registering its wait, and again when the wait ran out. A fleet re-polling
    every 30 s paid that per agent. Now the wait asks only when a job was signalled since the
    claim attempt, and leaves the last check to the agent's next attempt: a long-poll that
    waits costs what a claim-next without a wait costs. Statements are counted at the store's
    connector; a job queued during a wait still wakes it at once."""
    async with open_api(database_url) as api:
        agent = await api.agent()
        connector: Any = api.store.db
        statements: list[str] = []
        for name in ("one", "all", "each", "locked"):
            _count_statements(connector, name, statements)

        async def cost(body: dict[str, Any]) -> list[str]:
            statements.clear()
            response = await api.claim_next(agent, body)
            assert response.status_code == 204, response.text
            # The key lookup (a 2 s cache) and the presence write (one per interval) are
            # throttled on their own; what is left is the claim-next path's.
            return [s for s in statements if s not in ("get_api_key", "touch_agent")]

        await cost({"leaseSeconds": 30})  # the first: the agent is looked up once (404 or not)
        immediate = await cost({"leaseSeconds": 30})
        waited = await cost({"leaseSeconds": 30, "waitSeconds": 0.3})
        assert waited == immediate, (immediate, waited)
        assert len(set(waited)) == 1, waited  # the claim attempt's statement alone

        poll = asyncio.ensure_future(api.claim_next(agent, {"leaseSeconds": 30, "waitSeconds": 60}))
        await await_until(
            lambda: api.store.db.waiters.waiting(UUID(agent)) == 1,
            what="the long-poll to wait",
        )
        job = await api.enqueue(agent)
        claimed = await asyncio.wait_for(poll, 30)
        assert claimed.status_code == 200 and claimed.json()["id"] == job["id"]


def _count_statements(connector: Any, name: str, statements: list[str]) -> None:
    method = getattr(connector, name)

    async def counting(query: str, *args: Any, **kwargs: Any) -> Any:
        statements.append(query)
        return await method(query, *args, **kwargs)

    setattr(connector, name, counting)
