"""Bad input is 400/413 with the error shape, never a 500, plus a fuzzing sweep."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.server_app import Api, make_api

pytestmark = pytest.mark.anyio


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = r.json()
    assert set(body) == {"message", "code", "details"}
    assert body["code"] == code
    assert isinstance(body["message"], str)
    assert body["message"]
    return body


async def test_malformed_uuids_are_400_naming_the_field(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    for method, path in [
        ("GET", "/api/v1/workspaces/not-a-uuid/jobs"),
        ("GET", api.path("jobs/123")),
        ("GET", api.path("job-agents/xyz/jobs")),
        ("POST", api.path(f"job-agents/{agent}/jobs/zzz/claim")),
        ("POST", api.path(f"job-agents/nope/jobs/{job['id']}/claim")),
        ("POST", api.path("jobs/1/heartbeat")),
        ("PUT", api.path("jobs/1/status")),
        ("GET", api.path("jobs/1/attempts")),
        ("GET", api.path("job-claims?jobAgentId=bad")),
    ]:
        r = await api.client.request(method, path, headers={"X-API-Key": api.api_key})
        body = assert_error(r, 400, "VALIDATION_ERROR")
        fields = [e["field"] for e in body["details"]["errors"]]
        assert any(f.startswith(("path.", "query.")) for f in fields), (path, fields)


async def test_wrong_types_are_400(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    cases: list[tuple[str, str, Any]] = [
        ("POST", f"job-agents/{agent}/claim", {"leaseSeconds": "soon"}),
        ("POST", f"job-agents/{agent}/claim", {"leaseSeconds": -1}),
        ("POST", f"job-agents/{agent}/claim", {"waitSeconds": -5}),
        ("POST", f"job-agents/{agent}/claim", [1, 2]),
        ("POST", f"job-agents/{agent}/jobs/{job['id']}/claim", {"leaseSeconds": 1.5}),
        ("POST", f"jobs/{job['id']}/heartbeat", {"claimId": "not-a-uuid"}),
        ("PUT", f"jobs/{job['id']}/status", {"status": 3}),
        ("PUT", f"jobs/{job['id']}/status", {}),
        ("PUT", f"jobs/{job['id']}/status", {"status": "successful", "metadata": "x"}),
        ("PUT", f"job-agents/{agent}", {"name": "", "type": "shell"}),
        ("PUT", f"job-agents/{agent}", {"type": "shell"}),
        ("PUT", f"job-agents/{agent}", {"name": "x", "type": "y", "config": [1]}),
        ("POST", f"job-agents/{agent}/jobs", {"dispatchContext": "text"}),
        ("POST", f"job-agents/{agent}/jobs", "a string"),
    ]
    for method, rest, body in cases:
        r = await api.call(method, rest, body)
        assert_error(r, 400, "VALIDATION_ERROR")
    assert (await api.job(job["id"]))["status"] == "queued"


async def test_unknown_statuses_are_400(api: Api) -> None:
    agent = await api.agent()
    job = await api.enqueue(agent)
    r = await api.status(job["id"], {"status": "done"})
    body = assert_error(r, 400, "VALIDATION_ERROR")
    assert body["details"]["errors"][0]["field"] == "body.status"
    r = await api.call("GET", f"job-agents/{agent}/jobs", params={"status": "running"})
    assert_error(r, 400, "VALIDATION_ERROR")
    r = await api.call("GET", "jobs", params={"status": "QUEUED"})
    assert_error(r, 400, "VALIDATION_ERROR")
    r = await api.call("GET", "job-claims", params={"state": "stuck"})
    assert_error(r, 400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": -1},
        {"limit": "ten"},
        {"offset": -1},
        {"offset": "x"},
        {"includeDispatchContext": "maybe"},
    ],
)
async def test_out_of_range_paging_is_400(api: Api, params: dict[str, Any]) -> None:
    agent = await api.agent()
    for rest in (f"job-agents/{agent}/jobs", "jobs", "job-agents", "job-claims"):
        if "includeDispatchContext" in params and rest != f"job-agents/{agent}/jobs":
            continue
        r = await api.call("GET", rest, params=params)
        body = assert_error(r, 400, "VALIDATION_ERROR")
        assert body["details"]["errors"][0]["field"].startswith("query.")
    r = await api.call("GET", "jobs", params={"limit": 1000, "offset": 0})
    assert r.status_code == 200


async def test_invalid_json_is_400(api: Api) -> None:
    agent = await api.agent()
    for content in (b"{not json", b'{"leaseSeconds": }', b"\xff\xfe", b"[", b"nul"):
        r = await api.client.post(
            api.path(f"job-agents/{agent}/claim"),
            content=content,
            headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        )
        assert_error(r, 400, "VALIDATION_ERROR")


async def test_bodies_are_json_whatever_the_content_type(api: Api) -> None:
    agent = await api.agent()
    await api.enqueue(agent)
    # `curl -d` labels bodies as form data; they are still parsed as JSON.
    r = await api.client.post(
        api.path(f"job-agents/{agent}/claim"),
        content=b'{"leaseSeconds": 30}',
        headers={"X-API-Key": api.api_key, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["leaseSeconds"] == 30


@pytest.fixture
async def small_api(database_url: str, anyio_backend: str) -> AsyncIterator[Api]:
    async for value in make_api(database_url, max_body_bytes=4096):
        yield value


async def test_oversized_bodies_are_413(small_api: Api) -> None:
    api = small_api
    agent = await api.agent()
    big = {"dispatchContext": {"blob": "x" * 5000}}
    r = await api.call("POST", f"job-agents/{agent}/jobs", big)
    body = assert_error(r, 413, "PAYLOAD_TOO_LARGE")
    assert body["details"]["maxBodyBytes"] == 4096

    # Without Content-Length (chunked): the streamed size is counted.
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"dispatchContext": {"blob": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}}'

    r = await api.client.post(
        api.path(f"job-agents/{agent}/jobs"),
        content=chunks(),
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
    )
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")

    # The hot endpoints (served by the fast path) count the same way.
    r = await api.call("POST", f"job-agents/{agent}/claim", {"pad": "z" * 5000})
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")
    r = await api.client.post(
        api.path(f"job-agents/{agent}/claim"),
        content=chunks(),
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
    )
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")
    r = await api.call(
        "PUT", f"jobs/{uuid.uuid4()}/status", {"status": "queued", "message": "m" * 5000}
    )
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")

    # A small chunked body goes through.
    async def small() -> AsyncIterator[bytes]:
        yield b'{"metadata": '
        yield b'{"a": "b"}}'

    r = await api.client.post(
        api.path(f"job-agents/{agent}/jobs"),
        content=small(),
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["metadata"] == {"a": "b"}
    r = await api.call("GET", f"job-agents/{agent}/jobs")
    assert r.json()["total"] == 1


async def test_unknown_routes_and_methods_use_the_error_shape(api: Api) -> None:
    r = await api.client.get("/nope")
    assert_error(r, 404, "NOT_FOUND")
    r = await api.client.get(api.path("nothing-here"), headers={"X-API-Key": api.api_key})
    assert_error(r, 404, "NOT_FOUND")
    r = await api.client.patch(api.path("jobs"), headers={"X-API-Key": api.api_key})
    assert_error(r, 405, "METHOD_NOT_ALLOWED")


async def test_unexpected_errors_are_500_without_internals(api: Api) -> None:
    secret_detail = "database password is hunter2"

    async def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(secret_detail)

    api.store.entities.list_jobs = explode  # type: ignore[method-assign]
    transport = httpx.ASGITransport(app=api.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.get(api.path("jobs"), headers={"X-API-Key": api.api_key})
    body = assert_error(r, 500, "INTERNAL_ERROR")
    assert "hunter2" not in r.text
    assert body["details"] is None


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
_field_names = st.sampled_from(
    [
        "status",
        "claimId",
        "leaseSeconds",
        "waitSeconds",
        "message",
        "externalId",
        "metadata",
        "name",
        "type",
        "config",
        "jobAgentConfig",
        "dispatchContext",
    ]
)
_bodies = st.dictionaries(_field_names, _json_values, max_size=5) | _json_values


def _examples(count: int) -> list[tuple[int, Any]]:
    """``count`` random (endpoint index, body) pairs drawn by hypothesis."""
    drawn: list[tuple[int, Any]] = []

    @settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(body=_bodies, which=st.integers(0, 5))
    def probe(body: Any, which: int) -> None:
        drawn.append((which, body))

    probe()
    return drawn


async def test_fuzzed_bodies_never_500(api: Api) -> None:
    """Random JSON bodies on every body-taking endpoint: always a 2xx/4xx with the shape."""
    agent = await api.agent()
    job = await api.enqueue(agent)
    endpoints = [
        ("PUT", f"job-agents/{uuid.uuid4()}"),
        ("POST", f"job-agents/{agent}/jobs"),
        ("POST", f"job-agents/{agent}/claim"),
        ("POST", f"job-agents/{agent}/jobs/{job['id']}/claim"),
        ("POST", f"jobs/{job['id']}/heartbeat"),
        ("PUT", f"jobs/{job['id']}/status"),
    ]
    examples = _examples(80)
    assert len(examples) >= 20
    for which, body in examples:
        method, rest = endpoints[which]
        r = await api.call(method, rest, body if body is not None else {})
        assert r.status_code < 500, (method, rest, body, r.text)
        if r.status_code >= 400:
            assert set(r.json()) == {"message", "code", "details"}


async def test_values_a_database_cannot_store_are_never_500(api: Api) -> None:
    # PostgreSQL text and jsonb refuse NUL characters; huge numbers must not overflow columns.
    agent = await api.agent()
    job = await api.enqueue(agent)
    for method, rest, body in [
        ("PUT", f"job-agents/{uuid.uuid4()}", {"name": "a\x00b", "type": "x"}),
        ("POST", f"job-agents/{agent}/jobs", {"metadata": {"k\x00": "v\x00"}}),
        ("PUT", f"jobs/{job['id']}/status", {"status": "failure", "message": "a\x00b"}),
        ("POST", f"job-agents/{agent}/jobs", {"metadata": {"k": 2**80}}),
        ("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 2**80, "waitSeconds": 1e300}),
        ("POST", f"jobs/{job['id']}/heartbeat", {"leaseSeconds": 2**80}),
    ]:
        r = await api.call(method, rest, body)
        assert r.status_code < 500, (method, rest, r.text)
        if r.status_code >= 400:
            assert set(r.json()) == {"message", "code", "details"}
