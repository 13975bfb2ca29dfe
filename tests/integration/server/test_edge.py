"""The one HTTP edge: one admission step and one response step for the fast path and the
framework routes alike; JSON depth checked before any parser sees the body."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from jobagentctl.errors import JobAgentError, ServerUnavailable
from jobagentctl.routes import Routes
from jobagentctl.server.http.edge import json_too_deep
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import sqlite_path
from tests.fixtures.server_app import Api, open_api

pytestmark = pytest.mark.anyio

DEPTH = 64  # the default max_json_depth


def nested(depth: int) -> Any:
    """A JSON value nested ``depth`` levels (objects and arrays alternating, a string inside)."""
    value: Any = "leaf [{"
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


def test_json_depth_counts_levels_not_brackets_in_strings() -> None:
    for depth in (1, 2, 5, 63, 64, 65, 200):
        body = json.dumps(nested(depth)).encode()
        assert json_too_deep(body, 64) is (depth > 64), depth
    # Many shallow siblings are not deep; brackets inside strings do not nest.
    assert not json_too_deep(json.dumps([[1]] * 5000).encode(), 3)
    assert not json_too_deep(json.dumps({"s": "[" * 500 + '\\"' + "{" * 500}).encode(), 2)
    assert json_too_deep(b"[[[]]]", 2) and not json_too_deep(b"[[[]]]", 3)
    assert not json_too_deep(b"[[[[[[", 3)  # malformed: left to the parser


async def _count_key_lookups(api: Api) -> list[str]:
    calls: list[str] = []
    lookup = api.store.entities.get_api_key

    async def counting(prefix: str) -> Any:
        calls.append(prefix)
        return await lookup(prefix)

    api.store.entities.get_api_key = counting  # type: ignore[method-assign]
    return calls


async def test_a_request_handed_to_the_framework_is_authenticated_once(
    api_each_path: Api,
) -> None:
    api = api_each_path
    agent = await api.agent()
    job = await api.enqueue(agent)
    calls = await _count_key_lookups(api)
    # A hot route whose body does not validate: the fast path hands it to the framework.
    r = await api.claim(agent, job["id"], {"leaseSeconds": "x"})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
    assert len(calls) == 1
    r = await api.claim(agent, job["id"], {"leaseSeconds": 30})
    assert r.status_code == 200
    assert len(calls) == 2


async def test_every_5xx_is_logged_and_counted_on_both_paths(
    api_each_path: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api = api_each_path
    agent = await api.agent()
    job = await api.enqueue(agent)

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise ServerUnavailable("database unavailable")

    api.store.heartbeat = down  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="jobagentctl.server"):
        r = await api.heartbeat(job["id"], {"claimId": None})
    assert r.status_code == 503 and r.json()["code"] == "SERVICE_UNAVAILABLE"
    lines = [rec.getMessage() for rec in caplog.records]
    assert f"POST {Routes.HEARTBEAT} → 503" in lines
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]  # not unexpected
    metrics = (await api.client.get("/metrics")).text
    assert f'method="POST",route="{Routes.HEARTBEAT}",status="503"' in metrics


class _Unexpected(Exception):
    """A failure no code path expects: the kind of bug a 500 stands for."""


async def test_an_unexpected_error_is_one_500_and_one_log_line_on_both_paths(
    api_each_path: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """Both paths answer the same 500 body, and the exception is logged once, with its
    traceback, naming the route template — not the path's ids, nor the key — and is not raised
    out of the app (the server would log it a second time)."""
    api = api_each_path
    agent = await api.agent()
    job = await api.enqueue(agent)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise _Unexpected("the store broke")

    api.store.heartbeat = api.store.entities.get_job = broken  # type: ignore[method-assign]
    for method, rest, template in [
        ("POST", f"jobs/{job['id']}/heartbeat", Routes.HEARTBEAT),  # a hot route
        ("GET", f"jobs/{job['id']}", Routes.JOB),  # always the framework's
    ]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="jobagentctl.server"):
            r = await api.call(method, rest, {"claimId": None} if method == "POST" else None)
        assert r.status_code == 500
        assert (
            r.content
            == b'{"message": "internal server error", "code": "INTERNAL_ERROR", "details": null}'
        )
        errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert [rec.getMessage() for rec in errors] == [
            f"unhandled _Unexpected on {method} {template}"
        ]
        assert errors[0].exc_info is not None and errors[0].exc_info[0] is _Unexpected
        assert "the store broke" in caplog.text  # the traceback
        assert job["id"] not in caplog.text and api.api_key.split(".")[1] not in caplog.text


def _deep_bodies(agent: str) -> list[tuple[str, str, Any]]:
    too_deep = nested(DEPTH)  # inside a body object: DEPTH + 1 levels
    return [
        ("POST", f"job-agents/{agent}/jobs", {"dispatchContext": {"x": too_deep}}),
        ("PUT", f"job-agents/{agent}", {"name": "a", "type": "t", "config": too_deep}),
        ("POST", f"job-agents/{agent}/claim", {"waitSeconds": 0, "x": too_deep}),
        ("POST", f"job-agents/{agent}/claim?x=1", {"waitSeconds": 0, "x": too_deep}),
    ]


async def test_regression_json_deeper_than_the_limit_is_refused_on_every_path(
    api_each_path: Api,
) -> None:
    """Deep bodies were stored, and then every response holding them was a 500: they are
    refused before any parser sees them."""
    api = api_each_path
    agent = await api.agent()
    for method, rest, body in _deep_bodies(agent):
        r = await api.client.request(
            method,
            api.path(rest),
            content=json.dumps(body),
            headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        )
        assert r.status_code == 400, (rest, r.text)
        assert r.json()["code"] == "VALIDATION_ERROR"
        assert r.json()["details"] == {"maxJsonDepth": DEPTH}
    page = await api.call("GET", "jobs")
    assert page.status_code == 200 and page.json()["total"] == 0  # nothing was stored


async def test_regression_json_at_the_limit_round_trips(api: Api) -> None:
    """The deepest accepted body is stored and served back by every read, and claimed."""
    agent = await api.agent()
    context = {"x": nested(DEPTH - 2)}  # body {"dispatchContext": {"x": …}}: DEPTH levels
    job = await api.enqueue(agent, dispatchContext=context)
    assert (await api.job(job["id"]))["dispatchContext"] == context
    for rest, params in (
        ("jobs", None),
        (f"job-agents/{agent}/jobs", {"includeDispatchContext": 1}),
    ):
        r = await api.call("GET", rest, params=params)
        assert r.status_code == 200, r.text
    claimed = await api.claim_next(agent, {"leaseSeconds": 30})
    assert claimed.status_code == 200 and claimed.json()["dispatchContext"] == context
    r = await api.status(job["id"], {"status": "successful", "claimId": claimed.json()["claimId"]})
    assert r.status_code == 202


def _hex_only(agent: str) -> str:
    return agent.replace("-", "")


@pytest.mark.parametrize(
    ("query", "spell", "fast_path"),
    [
        (b"x=1", str.lower, False),
        (b"x=1", str.lower, True),  # a query string: the fast path hands it to the framework
        (b"", _hex_only, True),  # a non-canonical UUID (no hyphens): the framework as well
        (b"", str.upper, True),  # uppercase is 36 characters: served by the fast path
    ],
    ids=["framework-only", "query-string", "uuid-without-hyphens", "uppercase-uuid"],
)
async def test_regression_framework_long_poll_sees_the_client_leave(
    database_url: str,
    anyio_backend: str,
    query: bytes,
    spell: Callable[[str], str],
    fast_path: bool,
) -> None:
    """A long-poll on the framework path (any query string, a non-canonical UUID)
    ends when the client goes away, and the job queued afterwards is not claimed for nobody."""
    async with open_api(database_url, fast_path=fast_path) as api:
        agent = await api.agent()
        path = api.path(f"job-agents/{spell(agent)}/claim")
        body = {"waitSeconds": 30, "leaseSeconds": 30}
        poll, gone = api.request_then_leave("POST", path, body, query=query)
        await api.until_long_polls()
        gone.set()
        await asyncio.wait_for(poll, 20)
        job = await api.enqueue(agent)
        assert (await api.job(job["id"]))["status"] == "queued"


async def _key_id(api: Api, key: str) -> Any:
    record = await api.store.entities.get_api_key(key.split(".", 1)[0])
    assert record is not None
    return record.id


async def test_regression_revocation_reaches_open_long_polls(api_each_path: Api) -> None:
    """A claim-next opened before the key was revoked handed out a job (with its
    dispatchContext) when one was queued later. The key is checked again before a hand-out."""
    api = api_each_path
    agent = await api.agent()
    key = await api.new_key(agent)
    poll = asyncio.ensure_future(
        api.claim_next(agent, {"waitSeconds": 30, "leaseSeconds": 30}, key=key)
    )
    await api.until_long_polls()
    assert await api.store.entities.revoke_api_key(await _key_id(api, key))
    job = await api.enqueue(agent, dispatchContext={"secret": "s3cr3t"})
    r = await asyncio.wait_for(poll, 30)
    assert r.status_code == 401, r.text
    assert "s3cr3t" not in r.text
    assert (await api.job(job["id"]))["status"] == "queued"


@pytest.mark.parametrize("rest", ["jobs", "job-agents/{agent}/claim"])
async def test_regression_key_lookup_failures_are_503(
    database_url: str, anyio_backend: str, rest: str
) -> None:
    """A key lookup failing on the database was a 500 on the framework routes,
    after the pool's 10 s wait. Now 503 on every route, and a lookup that hangs is cut off
    after ``database_timeout``."""
    async with open_api(database_url, database_timeout=0.2) as api:
        agent = await api.agent()
        path = rest.format(agent=agent)
        method = "POST" if "claim" in rest else "GET"
        lookup = api.store.entities.get_api_key

        async def down(prefix: str) -> Any:
            raise ServerUnavailable("the database is unavailable")

        async def frozen(prefix: str) -> Any:
            await asyncio.Event().wait()

        for broken in (down, frozen):
            api.store.entities.get_api_key = broken  # type: ignore[method-assign]
            r = await asyncio.wait_for(api.call(method, path, {"waitSeconds": 0}), 30)
            assert r.status_code == 503, r.text
            assert r.json()["code"] == "SERVICE_UNAVAILABLE"
        api.store.entities.get_api_key = lookup  # type: ignore[method-assign]
        assert (await api.call(method, path, {"waitSeconds": 0})).status_code in (200, 204)


async def test_regression_a_known_prefix_costs_what_an_unknown_one_costs(
    database_url: str, anyio_backend: str
) -> None:
    """A known prefix with a wrong secret was answered from the key cache,
    faster than an unknown prefix (a database lookup). Both now take the same path: one lookup
    and one digest comparison; the right key stays cached."""
    async with open_api(database_url, key_cache_seconds=60) as api:
        assert (await api.call("GET", "jobs")).status_code == 200  # the key is cached now
        calls = await _count_key_lookups(api)
        prefix = api.api_key.split(".", 1)[0]
        wrong = f"{prefix}.{'x' * 43}"
        unknown = f"jac_000000000000.{'x' * 43}"
        answers = []
        for key in (wrong, unknown, api.api_key):
            r = await api.call("GET", "jobs", key=key)
            answers.append((r.status_code, r.content if r.status_code == 401 else b""))
        assert answers[0] == answers[1] and answers[0][0] == 401
        assert answers[2][0] == 200
        assert calls == [prefix, "jac_000000000000"]  # the right key: from the cache


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_regression_a_locked_sqlite_answers_503_fast(
    database_url: str, anyio_backend: str, fast_path: bool
) -> None:
    """With the key cached and another process holding SQLite's write
    lock, an enqueue hung 20 s, then answered 201 (SQLite's own 30 s busy timeout applied, not
    ``database_timeout``). Now 503 within the bound, as on PostgreSQL; nothing is written."""
    settings = ServerSettings(database=database_url, database_timeout=1)
    async with open_api(
        database_url,
        fast_path=fast_path,
        database_timeout=1,
        key_cache_seconds=60,
        store_options=settings.store_options(),
    ) as api:
        agent = await api.agent()
        job = await api.enqueue(agent)
        claimed = await api.claim_next(agent, {"leaseSeconds": 60})
        assert claimed.status_code == 200
        holder = sqlite3.connect(sqlite_path(database_url), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            async with asyncio.timeout(20):  # the old behaviour took 30 s
                answers = [
                    await api.call("POST", f"job-agents/{agent}/jobs", {}),
                    await api.heartbeat(job["id"], {"claimId": claimed.json()["claimId"]}),
                ]
            for r in answers:
                assert r.status_code == 503, r.text
                assert r.json()["code"] == "SERVICE_UNAVAILABLE"
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        page = await api.call("GET", "jobs")
        assert page.json()["total"] == 1  # the refused enqueue left nothing behind
        assert (await api.call("POST", f"job-agents/{agent}/jobs", {})).status_code == 201


async def test_regression_readyz_answers_503_at_once_while_the_database_hangs(api: Api) -> None:
    """/readyz hung with a frozen database, then said 200."""

    async def frozen(timeout: float | None = None) -> JobAgentError | None:
        await asyncio.Event().wait()
        return None

    api.store.readiness = frozen  # type: ignore[method-assign]
    r = await asyncio.wait_for(api.client.get(Routes.READYZ), 30)
    assert r.status_code == 503 and r.json()["code"] == "SERVICE_UNAVAILABLE"


def test_the_listen_queue_grows_with_the_descriptor_limit_and_the_cap_stays_under_it() -> None:
    """A long listen queue for a fleet (the kernel drops connections past it, and each costs
    its client seconds of SYN retries), never at the price of the connection cap: what the
    queue reserves stays within half of the descriptor limit."""
    from jobagentctl.server.http.connections import connection_cap, listen_backlog

    assert [listen_backlog(n) for n in (0, 1024, 4096, 20_000, 1 << 20)] == [
        128,
        224,
        992,
        2048,
        2048,
    ]
    for limit in (1024, 4096, 20_000):
        cap = connection_cap(1 << 30, limit)
        assert limit // 2 - 128 <= cap < limit - 2 * listen_backlog(limit)
    assert connection_cap(10_000, 20_000) == 10_000
