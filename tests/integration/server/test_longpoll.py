"""Long-poll claim-next: woken as soon as a job is queued, else 204 at waitSeconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import httpx
import pytest

from tests.fixtures.server_app import Api, make_api

pytestmark = pytest.mark.anyio

# Longer than any test may take: a long-poll of the ``patient`` app that has to run this out
# (or wait for a periodic re-check) before it answers fails its test.
LONG = 120
# The contract: a queued job (or shutdown, or the client leaving) ends a waiting claim within a
# second or so. 5 s is headroom for a busy machine, and still shorter than the service's own
# periodic re-check of the queue (10 s), the one way left for a wait to end early unsignalled.
WOKEN_WITHIN = 5.0


@pytest.fixture
async def patient(database_url: str, anyio_backend: str) -> AsyncIterator[Api]:
    """An app on which only a signal ends a long-poll early: ``waitSeconds`` up to ``LONG``
    allowed (the default cap is 30 s, which would end a broken wait in time for a lax bound),
    and the store's own re-check of the queue (SQLite's every second, for other processes on
    the same file; PostgreSQL's while LISTEN is down) no more often than that."""
    async for api in make_api(
        database_url, max_wait_seconds=LONG, store_options={"poll_interval": LONG}
    ):
        yield api


@dataclass
class Waits:
    """The store's long-poll waits (``Store.wait_for_job``): how many began, how many returned
    before their timeout (woken), how many lasted all of it (ran out: the re-check at its end
    may still find a job, so its result cannot tell). One cancelled (server stopping, client
    gone) is neither."""

    started: int = 0
    woken: int = 0
    ran_out: int = 0


def _record_waits(api: Api) -> Waits:
    waits = Waits()
    wait_for_job = api.store.wait_for_job

    async def recorded(agent_id: UUID, timeout: float, **options: Any) -> bool:
        waits.started += 1
        began = time.monotonic()
        result = await wait_for_job(agent_id, timeout, **options)
        if time.monotonic() - began < timeout:
            waits.woken += 1
        else:
            waits.ran_out += 1
        return result

    api.store.wait_for_job = recorded  # type: ignore[method-assign]
    return waits


async def _timed(call: Awaitable[httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await call
    return response, time.monotonic() - started


async def _woken(waiter: Awaitable[httpx.Response], waits: Waits, since: float) -> httpx.Response:
    """The long-poll's answer, which must be a wake-up's: within ``WOKEN_WITHIN`` of ``since``
    (when the job was queued) and with no wait having run out."""
    r = await waiter
    latency = time.monotonic() - since
    assert waits.ran_out == 0, f"a wait ran out instead of being woken: {waits}"
    assert waits.woken >= 1, waits
    assert latency < WOKEN_WITHIN, latency
    return r


async def test_a_waiting_claim_returns_as_soon_as_a_job_is_queued(patient: Api) -> None:
    api = patient
    waits = _record_waits(api)
    agent = await api.agent()
    body = {"waitSeconds": LONG, "leaseSeconds": 30}
    waiter = asyncio.ensure_future(api.claim_next(agent, body))
    await api.until_long_polls()
    queued_at = time.monotonic()
    job = await api.enqueue(agent)
    r = await _woken(waiter, waits, queued_at)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == job["id"]


async def test_no_job_is_204_at_wait_seconds(patient: Api) -> None:
    api = patient
    waits = _record_waits(api)
    agent = await api.agent()
    r, elapsed = await _timed(api.claim_next(agent, {"waitSeconds": 1}))
    assert r.status_code == 204
    assert r.content == b""
    assert 0.9 <= elapsed < 30  # its own 1 s, not the server's cap of LONG
    # No waitSeconds: no wait at all, 204 at once.
    started = waits.started
    r, elapsed = await _timed(api.claim_next(agent))
    assert r.status_code == 204
    assert waits.started == started
    assert elapsed < 30


async def test_the_wait_is_capped_by_max_wait_seconds(database_url: str) -> None:
    async for api in make_api(database_url, max_wait_seconds=1):
        agent = await api.agent()
        r, elapsed = await _timed(api.claim_next(agent, {"waitSeconds": 60}))
        assert r.status_code == 204
        assert 0.9 <= elapsed < 30  # the cap's 1 s, not the 60 s asked for


async def test_shutdown_wakes_waiters_with_204(patient: Api) -> None:
    api = patient
    waits = _record_waits(api)
    agent = await api.agent()
    body = {"waitSeconds": LONG}
    waiters = [asyncio.ensure_future(api.claim_next(agent, body)) for _ in range(3)]
    await api.until_long_polls(3)
    started = time.monotonic()
    api.app.framework.state.service.begin_shutdown()
    responses = await asyncio.gather(*waiters)
    assert [r.status_code for r in responses] == [204, 204, 204]
    assert waits.ran_out == 0, waits
    assert time.monotonic() - started < WOKEN_WITHIN


async def test_one_job_many_waiters_exactly_one_gets_it(patient: Api) -> None:
    api = patient
    agent = await api.agent()
    body = {"waitSeconds": LONG, "leaseSeconds": 30}
    waiters = [asyncio.ensure_future(api.claim_next(agent, body)) for _ in range(4)]
    await api.until_long_polls(4)
    job = await api.enqueue(agent)
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    # The others wait on for a job that will not come: end their long-polls.
    api.app.framework.state.service.begin_shutdown()
    responses = await asyncio.gather(*waiters)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 204, 204, 204]
    (winner,) = [r for r in responses if r.status_code == 200]
    assert winner.json()["id"] == job["id"]


async def test_release_and_reaper_requeue_wake_waiters(patient: Api) -> None:
    api = patient
    waits = _record_waits(api)
    agent = await api.agent()
    await api.enqueue(agent)
    first = (await api.claim_next(agent, {"leaseSeconds": 30})).json()

    body = {"waitSeconds": LONG, "leaseSeconds": 30}
    waiter = asyncio.ensure_future(api.claim_next(agent, body))
    await api.until_long_polls()
    released_at = time.monotonic()
    status = {"status": "queued", "claimId": first["claimId"]}
    assert (await api.status(first["id"], status)).status_code == 202
    r = await _woken(waiter, waits, released_at)
    assert r.status_code == 200
    second = r.json()
    assert second["attempt"] == 2

    waiter = asyncio.ensure_future(api.claim_next(agent, body))
    await api.until_long_polls()
    await api.expire(second["id"])
    reaped_at = time.monotonic()
    assert (await api.reap()).requeued == 1
    r = await _woken(waiter, waits, reaped_at)
    assert r.status_code == 200
    assert r.json()["attempt"] == 3


async def test_a_waiter_for_an_unknown_agent_is_404_at_once(patient: Api) -> None:
    import uuid

    api = patient
    waits = _record_waits(api)
    body = {"waitSeconds": LONG, "leaseSeconds": 30}
    r, elapsed = await _timed(api.claim_next(str(uuid.uuid4()), body))
    assert r.status_code == 404
    assert waits.started == 0  # found out before waiting, not after
    assert elapsed < 30


async def test_a_client_that_leaves_does_not_get_a_job_claimed_for_it(patient: Api) -> None:
    """A long-poll whose connection closes stops waiting; a job queued afterwards stays queued
    (claiming it for nobody would hold it until its lease ran out)."""
    api = patient
    waits = _record_waits(api)
    agent = await api.agent()
    body = {"waitSeconds": LONG, "leaseSeconds": 30}
    request, gone = api.request_then_leave("POST", api.path(f"job-agents/{agent}/claim"), body)
    await api.until_long_polls()
    left_at = time.monotonic()
    gone.set()  # the client hangs up
    await asyncio.wait_for(request, 30)
    assert time.monotonic() - left_at < WOKEN_WITHIN
    assert waits.ran_out == 0, waits
    job = await api.enqueue(agent)
    assert (await api.job(job["id"]))["status"] == "queued"
    assert api.long_polls_waiting() == 0


async def test_a_failing_wait_is_503_not_a_busy_loop(api: Api) -> None:
    from jobagentctl.errors import ServerUnavailable

    agent = await api.agent()
    calls = 0

    async def broken(agent_id: object, timeout: float, **options: object) -> bool:
        nonlocal calls
        calls += 1
        raise ServerUnavailable("database unreachable")

    api.store.wait_for_job = broken  # type: ignore[method-assign]
    r = await api.claim_next(agent, {"waitSeconds": 20, "leaseSeconds": 30})
    assert r.status_code == 503
    assert r.json()["code"] == "SERVICE_UNAVAILABLE"
    assert calls == 1
    assert api.long_polls_waiting() == 0
