"""Long-poll claim-next (ISSUE 2): woken as soon as a job is queued, else 204 at waitSeconds."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tests.fixtures.waiting import await_until
from tests.server.conftest import Api, make_api

pytestmark = pytest.mark.anyio


def _waiting(api: Api) -> float:
    value = api.app.state.metrics.registry.get_sample_value("jobagentctl_long_polls_waiting")
    return float(value or 0.0)


async def _until_waiting(api: Api, count: int = 1) -> None:
    async def waiting() -> bool:
        return _waiting(api) >= count

    await await_until(waiting, what=f"{count} long-poll(s) waiting")


async def _timed(coro: asyncio.Future[httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await coro
    return response, time.monotonic() - started


async def test_a_waiting_claim_returns_as_soon_as_a_job_is_queued(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No re-check before the wait runs out: not the store's (SQLite re-checks every second)
    # nor the service's (every 10 s). Only the signal can answer before 60 s, so the bound
    # below can be generous for a busy machine and still fail when the wake-up is broken.
    monkeypatch.setattr(api.store.connector, "wait_step", lambda remaining: remaining)
    monkeypatch.setattr("jobagentctl.server.service._WAIT_SLICE_SECONDS", 60.0)
    agent = await api.agent()
    waiter = asyncio.ensure_future(api.claim_next(agent, {"waitSeconds": 60, "leaseSeconds": 30}))
    await _until_waiting(api)
    queued_at = time.monotonic()
    job = await api.enqueue(agent)
    r = await waiter
    latency = time.monotonic() - queued_at
    assert r.status_code == 200, r.text
    assert r.json()["id"] == job["id"]
    # Woken by the signal, not by the end of the 60 s wait.
    assert latency < 30, latency


async def test_no_job_is_204_at_wait_seconds(api: Api) -> None:
    agent = await api.agent()
    r, elapsed = await _timed(asyncio.ensure_future(api.claim_next(agent, {"waitSeconds": 1})))
    assert r.status_code == 204
    assert r.content == b""
    assert 0.9 <= elapsed < 30
    # No wait at all: 204 at once.
    r, elapsed = await _timed(asyncio.ensure_future(api.claim_next(agent)))
    assert r.status_code == 204
    assert elapsed < 30  # not the 1 s wait: well under it on an idle machine


async def test_the_wait_is_capped_by_max_wait_seconds(database_url: str) -> None:
    async for api in make_api(database_url, max_wait_seconds=1):
        agent = await api.agent()
        request = api.claim_next(agent, {"waitSeconds": 60})
        r, elapsed = await _timed(asyncio.ensure_future(request))
        assert r.status_code == 204
        assert elapsed < 10


async def test_shutdown_wakes_waiters_with_204(api: Api) -> None:
    agent = await api.agent()
    waiters = [asyncio.ensure_future(api.claim_next(agent, {"waitSeconds": 25})) for _ in range(3)]
    await _until_waiting(api, 3)
    started = time.monotonic()
    api.app.state.service.begin_shutdown()
    responses = await asyncio.gather(*waiters)
    assert [r.status_code for r in responses] == [204, 204, 204]
    assert time.monotonic() - started < 5


async def test_one_job_many_waiters_exactly_one_gets_it(api: Api) -> None:
    agent = await api.agent()
    waiters = [
        asyncio.ensure_future(api.claim_next(agent, {"waitSeconds": 3, "leaseSeconds": 30}))
        for _ in range(4)
    ]
    await _until_waiting(api, 4)
    job = await api.enqueue(agent)
    responses = await asyncio.gather(*waiters)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 204, 204, 204]
    (winner,) = [r for r in responses if r.status_code == 200]
    assert winner.json()["id"] == job["id"]


async def test_release_and_reaper_requeue_wake_waiters(api: Api) -> None:
    agent = await api.agent()
    await api.enqueue(agent)
    first = (await api.claim_next(agent, {"leaseSeconds": 30})).json()

    waiter = asyncio.ensure_future(api.claim_next(agent, {"waitSeconds": 25, "leaseSeconds": 30}))
    await _until_waiting(api)
    body = {"status": "queued", "claimId": first["claimId"]}
    assert (await api.status(first["id"], body)).status_code == 202
    r = await asyncio.wait_for(waiter, 10)
    assert r.status_code == 200
    second = r.json()
    assert second["attempt"] == 2

    waiter = asyncio.ensure_future(api.claim_next(agent, {"waitSeconds": 25, "leaseSeconds": 30}))
    await _until_waiting(api)
    await api.expire(second["id"])
    assert (await api.reap()).requeued == 1
    r = await asyncio.wait_for(waiter, 10)
    assert r.status_code == 200
    assert r.json()["attempt"] == 3


async def test_a_waiter_for_an_unknown_agent_is_404_at_once(api: Api) -> None:
    import uuid

    started = time.monotonic()
    r = await api.claim_next(str(uuid.uuid4()), {"waitSeconds": 20, "leaseSeconds": 30})
    assert r.status_code == 404
    assert time.monotonic() - started < 10


async def test_a_client_that_leaves_does_not_get_a_job_claimed_for_it(api: Api) -> None:
    """A long-poll whose connection closes stops waiting; a job queued afterwards stays queued
    (claiming it for nobody would hold it until its lease ran out)."""
    agent = await api.agent()
    body = json.dumps({"waitSeconds": 25, "leaseSeconds": 30}).encode()
    gone = asyncio.Event()
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        if not sent:
            sent.append({"type": "http.request"})
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    path = api.path(f"job-agents/{agent}/claim")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"x-api-key", api.api_key.encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    request = asyncio.ensure_future(api.app(scope, receive, send))
    await _until_waiting(api)
    gone.set()  # the client hangs up
    await asyncio.wait_for(request, 10)
    job = await api.enqueue(agent)
    assert (await api.job(job["id"]))["status"] == "queued"
    assert _waiting(api) == 0


async def test_a_failing_wait_is_503_not_a_busy_loop(api: Api) -> None:
    from jobagentctl.errors import ServerUnavailable

    agent = await api.agent()
    calls = 0

    async def broken(agent_id: object, timeout: float) -> bool:
        nonlocal calls
        calls += 1
        raise ServerUnavailable("database unreachable")

    api.store.wait_for_job = broken  # type: ignore[method-assign]
    r = await api.claim_next(agent, {"waitSeconds": 20, "leaseSeconds": 30})
    assert r.status_code == 503
    assert r.json()["code"] == "SERVICE_UNAVAILABLE"
    assert calls == 1
    assert _waiting(api) == 0
