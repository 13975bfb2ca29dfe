"""Hostile input: the request body limit (413), field length limits, and SQL injection
attempts in every string parameter and body field, on SQLite and PostgreSQL.

Injection strings must be inert: stored and returned verbatim where the field is free text, or
refused with 400 where it is not (ids, statuses, states, numbers) — and every table intact.
``test_regression_*`` hold defects this suite found (and that were fixed) to their fix.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.fixtures.cli import run_cli
from tests.fixtures.databases import sql
from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_app import Api, make_api

pytestmark = pytest.mark.anyio

INJECTIONS = [
    "'; DROP TABLE job; --",
    '" OR 1=1 --',
    "' OR '1'='1",
    "1; DELETE FROM api_key",
    "Robert'); DROP TABLE job_claim;--",
    "' UNION SELECT secret_hash, prefix FROM api_key --",
    "$$; DROP TABLE workspace; $$",
    "'; SELECT pg_sleep(30); --",
    "%' OR 1=1 --",
    # Placeholder look-alikes of both drivers: must not be taken for parameters.
    "%s",
    "%(job_id)s",
    ":job_id",
    "?",
    "$1",
    "\\'; --",
]
TABLES = ("workspace", "job_agent", "job", "job_claim", "job_attempt", "api_key")
BODY_ENDPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("PUT", "job-agents/{agent}", {"name": "x", "type": "shell", "config": {"blob": "{fill}"}}),
    ("POST", "job-agents/{agent}/jobs", {"metadata": {"blob": "{fill}"}}),
    ("POST", "job-agents/{agent}/jobs/{job}/claim", {"leaseSeconds": 30, "pad": "{fill}"}),
    ("POST", "job-agents/{agent}/claim", {"leaseSeconds": 30, "pad": "{fill}"}),
    ("POST", "jobs/{job}/heartbeat", {"pad": "{fill}"}),
    ("PUT", "jobs/{job}/status", {"status": "failure", "message": "{fill}"}),
]
LIMIT = 4096


def _assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    assert set(body) == {"message", "code", "details"} and body["code"] == code, body
    return body


def _tables(database_url: str) -> dict[str, int]:
    return {t: int(sql(database_url, f"SELECT count(*) FROM {t}")[0][0]) for t in TABLES}


@pytest.fixture
async def small_api(database_url: str, anyio_backend: str) -> AsyncIterator[Api]:
    async for value in make_api(database_url, max_body_bytes=LIMIT):
        yield value


def _body(template: dict[str, Any], size: int) -> bytes:
    """``template`` as JSON, its ``{fill}`` string padded so the body is exactly ``size``."""
    empty = json.dumps(template).replace("{fill}", "").encode()
    fill = "x" * (size - len(empty))
    return json.dumps(template).replace("{fill}", fill).encode()


# --- the body limit --------------------------------------------------------------------------


async def test_every_body_endpoint_refuses_a_body_over_the_limit(small_api: Api) -> None:
    api = small_api
    agent = await api.agent()
    headers = {"X-API-Key": api.api_key, "Content-Type": "application/json"}
    for method, rest, template in BODY_ENDPOINTS:
        job = await api.enqueue(agent)
        path = api.path(rest.format(agent=agent, job=job["id"]))
        before = _tables(api.database_url)

        over = _body(template, LIMIT + 1)
        r = await api.client.request(method, path, content=over, headers=headers)
        body = _assert_error(r, 413, "PAYLOAD_TOO_LARGE")
        assert body["details"] == {"maxBodyBytes": LIMIT}

        async def chunked(data: bytes = over) -> AsyncIterator[bytes]:
            for start in range(0, len(data), 1000):
                yield data[start : start + 1000]

        r = await api.client.request(method, path, content=chunked(), headers=headers)
        _assert_error(r, 413, "PAYLOAD_TOO_LARGE")
        assert _tables(api.database_url) == before, (method, rest, "changed by a 413")

        # Exactly at the limit is not too large (the answer depends on the endpoint's state).
        r = await api.client.request(method, path, content=_body(template, LIMIT), headers=headers)
        assert r.status_code != 413 and r.status_code < 500, (method, rest, r.text[:300])


async def test_an_oversized_body_without_a_key_is_401_not_413(small_api: Api) -> None:
    """Authentication comes first: an anonymous caller learns nothing about the limit."""
    agent = await small_api.agent()
    r = await small_api.client.post(
        small_api.path(f"job-agents/{agent}/jobs"),
        content=b"x" * (LIMIT * 4),
        headers={"Content-Type": "application/json"},
    )
    _assert_error(r, 401, "UNAUTHORIZED")


# Slow: a real `server start` process (13 s to start with the machine busy).
@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_real_server_refuses_a_body_over_one_mebibyte(live_server: LiveServer) -> None:
    """Through uvicorn and a socket, with the default limit (1 MiB)."""
    agent = live_server.create_agent("big")
    url = f"{live_server.api_url}/job-agents/{agent}/jobs"
    body = _body({"dispatchContext": {"blob": "{fill}"}}, 1024 * 1024 + 1)
    headers = {"X-API-Key": live_server.api_key, "Content-Type": "application/json"}
    with httpx.Client(timeout=60, trust_env=False) as client:
        _assert_error(client.post(url, content=body, headers=headers), 413, "PAYLOAD_TOO_LARGE")
        fits = _body({"dispatchContext": {"blob": "{fill}"}}, 1024 * 1024)
        assert client.post(url, content=fits, headers=headers).status_code == 201
        assert client.get(f"{live_server.url}/healthz").status_code == 200


# --- field lengths ---------------------------------------------------------------------------


async def test_field_length_limits(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    # (method, path, the rest of the body, the field, its longest accepted length); the field is
    # filled with its name's first letter.
    cases: list[tuple[str, str, dict[str, Any], str, int]] = [
        ("PUT", f"job-agents/{agent}", {"type": "t"}, "name", 255),
        ("PUT", f"job-agents/{agent}", {"name": "n"}, "type", 255),
        ("PUT", f"jobs/{job['id']}/status", {"status": "inProgress"}, "message", 65536),
        ("PUT", f"jobs/{job['id']}/status", {"status": "inProgress"}, "externalId", 1024),
    ]
    for method, rest, others, name, limit in cases:
        field = f"body.{name}"
        at_limit, over_limit = ({**others, name: name[0] * n} for n in (limit, limit + 1))
        before = _tables(api.database_url)
        r = await api.call(method, rest, over_limit)
        body = _assert_error(r, 400, "VALIDATION_ERROR")
        assert [e["field"] for e in body["details"]["errors"]] == [field]
        assert name[0] * 100 not in r.text, "the refused value is echoed back"
        assert _tables(api.database_url) == before
        r = await api.call(method, rest, at_limit)
        assert r.status_code == 202, (field, r.text[:300])
    stored = await api.job(job["id"])
    assert stored["message"] == "m" * 65536 and stored["externalId"] == "e" * 1024


# --- SQL injection ---------------------------------------------------------------------------


async def test_injection_strings_in_body_fields_are_stored_verbatim(api: Api) -> None:
    tables_before = set(TABLES)
    for n, text in enumerate(INJECTIONS):
        agent_id = str(uuid.uuid4())
        config = {text: text, "nested": [text, {text: text}]}
        r = await api.call(
            "PUT",
            f"job-agents/{agent_id}",
            {"name": text, "type": text, "config": config, "metadata": {text: text}},
        )
        assert r.status_code == 202, (text, r.text)
        got = (await api.call("GET", f"job-agents/{agent_id}")).json()
        assert (got["name"], got["type"], got["config"], got["metadata"]) == (
            text,
            text,
            config,
            {text: text},
        )

        created = await api.enqueue(
            agent_id,
            jobAgentConfig={text: text},
            dispatchContext={"cmd": text},
            metadata={text: text},
        )
        claimed = await api.claim_next(agent_id, {"leaseSeconds": 60})
        assert claimed.status_code == 200, claimed.text
        status = {
            "status": "failure",
            "claimId": claimed.json()["claimId"],
            "message": text,
            "externalId": text,
            "metadata": {"n": n, text: [text]},
        }
        r = await api.status(created["id"], status)
        assert r.status_code == 202, (text, r.text)
        job = await api.job(created["id"])
        assert (job["message"], job["externalId"], job["jobAgentConfig"]) == (
            text,
            text,
            {text: text},
        )
        assert job["dispatchContext"] == {"cmd": text}
        assert job["metadata"] == {text: [text], "n": n}

    counts = _tables(api.database_url)
    assert set(counts) == tables_before  # every table still there and readable
    assert counts["job"] == len(INJECTIONS) and counts["job_agent"] == len(INJECTIONS)
    assert counts["job_attempt"] == len(INJECTIONS) and counts["api_key"] == 1
    assert counts["workspace"] == 1
    # The workspace key still works: api_key was not emptied or rewritten.
    assert (await api.call("GET", "jobs")).status_code == 200


async def test_injection_strings_in_ids_query_and_key_are_refused(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    before = _tables(api.database_url)
    for text in INJECTIONS:
        quoted = quote(text, safe="")
        for method, rest in [
            ("GET", f"jobs/{quoted}"),
            ("GET", f"jobs/{quoted}/attempts"),
            ("POST", f"jobs/{quoted}/heartbeat"),
            ("PUT", f"jobs/{quoted}/status"),
            ("GET", f"job-agents/{quoted}"),
            ("GET", f"job-agents/{quoted}/jobs"),
            ("POST", f"job-agents/{quoted}/claim"),
            ("POST", f"job-agents/{agent}/jobs/{quoted}/claim"),
            ("DELETE", f"job-agents/{quoted}"),
        ]:
            r = await api.client.request(
                method,
                api.path(rest),
                headers={"X-API-Key": api.api_key},
                json={"status": "cancelled"} if rest.endswith("/status") else None,
            )
            _assert_error(r, 400, "VALIDATION_ERROR")
        r = await api.client.get(
            f"/api/v1/workspaces/{quoted}/jobs", headers={"X-API-Key": api.api_key}
        )
        _assert_error(r, 400, "VALIDATION_ERROR")
        for rest, params in [
            ("jobs", {"status": text}),
            (f"job-agents/{agent}/jobs", {"status": text}),
            ("job-claims", {"state": text}),
            ("job-claims", {"jobAgentId": text}),
            ("jobs", {"limit": text}),
            ("jobs", {"offset": text}),
            (f"job-agents/{agent}/jobs", {"includeDispatchContext": text}),
        ]:
            _assert_error(await api.call("GET", rest, params=params), 400, "VALIDATION_ERROR")
        for bad in [{"status": text}, {"status": "failure", "claimId": text}]:
            r = await api.status(job["id"], bad)
            _assert_error(r, 400, "VALIDATION_ERROR")
        r = await api.client.get(api.path("jobs"), headers={"X-API-Key": text})
        _assert_error(r, 401, "UNAUTHORIZED")
        prefix = api.api_key.split(".", 1)[0]
        r = await api.client.get(api.path("jobs"), headers={"X-API-Key": f"{prefix}.{text}"})
        _assert_error(r, 401, "UNAUTHORIZED")
    assert _tables(api.database_url) == before
    assert (await api.job(job["id"]))["status"] == "queued"


# Slow: a dozen `server` command processes (19-23 s a database with the machine busy).
@pytest.mark.slow
def test_injection_strings_in_admin_commands_are_stored_verbatim(
    database_url: str, tmp_path: Path
) -> None:
    """``server create-workspace NAME``: the name goes to the database as a parameter."""
    env = {
        "PATH": "/usr/bin:/bin",
        "XDG_DATA_HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    init = run_cli("server", "init", "-o", "json", "--database", database_url, env=env, timeout=120)
    assert init.returncode == 0, init.stderr
    for text in INJECTIONS[:6]:
        made = run_cli(
            "server",
            "create-workspace",
            text,
            "-o",
            "json",
            "--database",
            database_url,
            env=env,
            timeout=120,
        )
        assert made.returncode == 0, made.stderr
        workspace_id = json.loads(made.stdout)["workspaceId"]
        placeholder = "?" if database_url.startswith("sqlite") else "%s"
        rows = sql(
            database_url, f"SELECT name FROM workspace WHERE id = {placeholder}", [workspace_id]
        )
        assert rows == [(text,)]
    counts = _tables(database_url)
    assert counts["workspace"] == 1 + 6 and counts["api_key"] == 1 + 6


# --- regressions: defects found here, fixed ---------------------------------------------------


async def test_regression_booleans_are_not_numbers(api: Api) -> None:
    """``{"leaseSeconds": false}`` was taken as 0 (an unleased claim) and
    ``{"waitSeconds": true}`` as 1: malformed bodies are a 400."""
    agent = await api.agent()
    job = await api.enqueue(agent)
    r = await api.claim(agent, job["id"], {"leaseSeconds": False})
    assert r.status_code == 400, r.text
    r = await api.claim_next(agent, {"waitSeconds": True})
    assert r.status_code == 400, r.text


@pytest.fixture
def raw_client(api: Api) -> Iterator[httpx.AsyncClient]:
    # Real servers answer an exception with a 500; see the response instead of the exception.
    transport = httpx.ASGITransport(app=api.app, raise_app_exceptions=False)
    yield httpx.AsyncClient(transport=transport, base_url="http://test")


async def test_regression_lone_surrogate_is_refused_not_stored(
    api: Api, raw_client: httpx.AsyncClient
) -> None:
    """A JSON string escape of a lone surrogate (``"\\ud800"``) is valid JSON but not valid
    UTF-8 text. PostgreSQL refused it; SQLite stored it, and from then on every answer that
    carried the job — its own GET and the workspace's job list — was a 500: any key that may
    write metadata (an agent key too) could break the operators' job list."""
    agent = await api.agent()
    client = raw_client
    headers = {"X-API-Key": api.api_key, "Content-Type": "application/json"}
    async with client:
        r = await client.post(
            api.path(f"job-agents/{agent}/jobs"),
            content=b'{"metadata": {"note": "\\ud800"}}',
            headers=headers,
        )
        listed = await client.get(api.path("jobs"), headers=headers)
    assert listed.status_code == 200, listed.text
    _assert_error(r, 400, "VALIDATION_ERROR")


async def test_injection_does_not_stall_the_database(api: Api) -> None:
    """``pg_sleep`` in a field would block here if it ever ran as SQL."""
    agent = await api.agent()
    body = {
        "metadata": {"x": "'; SELECT pg_sleep(30); --"},
        "dispatchContext": {"y": "'||pg_sleep(30)||'"},
    }
    created = await asyncio.wait_for(api.call("POST", f"job-agents/{agent}/jobs", body), timeout=20)
    assert created.status_code == 201


async def test_regression_huge_offset_is_not_a_500(api: Api, raw_client: httpx.AsyncClient) -> None:
    """Past 2**63 - 1 an ``offset`` was a 400 on PostgreSQL but a 500 on SQLite (the driver's
    OverflowError escaped the store)."""
    agent = await api.agent()
    headers = {"X-API-Key": api.api_key}
    async with raw_client as client:
        for rest in ("jobs", "job-agents", "job-claims", f"job-agents/{agent}/jobs"):
            r = await client.get(api.path(rest), params={"offset": 2**64}, headers=headers)
            assert r.status_code in (200, 400), (rest, r.status_code, r.text)


async def test_nul_characters_are_stored_verbatim_or_refused(api: Api) -> None:
    """PostgreSQL cannot hold NUL in text or JSON (400); SQLite stores it verbatim. Never a
    500, and never a truncated value."""
    agent = await api.agent()
    job = await api.enqueue(agent)
    writes = [
        ("POST", f"job-agents/{agent}/jobs", {"metadata": {"a\u0000": "x\u0000y"}}),
        ("PUT", f"job-agents/{agent}", {"name": "a\u0000b", "type": "shell"}),
        ("PUT", f"jobs/{job['id']}/status", {"status": "failure", "message": "m\u0000n"}),
    ]
    sqlite = api.database_url.startswith("sqlite")
    for method, rest, body in writes:
        r = await api.call(method, rest, body)
        if not sqlite:
            _assert_error(r, 400, "VALIDATION_ERROR")
            continue
        assert r.status_code in (201, 202), r.text
    if sqlite:
        assert (await api.call("GET", f"job-agents/{agent}")).json()["name"] == "a\u0000b"
        assert (await api.job(job["id"]))["message"] == "m\u0000n"
    else:
        assert (await api.job(job["id"]))["status"] == "queued"
