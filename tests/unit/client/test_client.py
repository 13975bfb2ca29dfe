"""The API client against respx: every method, every error class, and ctrlplane-V1 shapes."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
import respx

from jobagentctl import __version__, errors
from jobagentctl.client import (
    Client,
    ConnectionOptions,
    iter_cursor_pages,
    iter_pages,
    translate,
)
from jobagentctl.models import ClaimedJob, JobStatus
from tests.fixtures import wire
from tests.fixtures.wire import AGENT, API_KEY, BASE, CLAIM, JOB, WORKSPACE, WS

# Every route mocked here must be called (the shared `mock_api` fixture reads this).
RESPX_ASSERT_ALL_CALLED = True


def sent(route: respx.Route) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(route.calls.last.request.content or b"null")
    return body


# --- every method: path, body, typed result -------------------------------------------------


def test_headers_and_base_url(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.get(f"{WS}/job-agents/{AGENT}").respond(200, json=wire.agent())
    found = client.get_agent(AGENT)
    assert found.name == "builder"
    request = route.calls.last.request
    assert request.headers["X-API-Key"] == API_KEY
    assert request.headers["User-Agent"] == f"jobagentctl/{__version__}"
    assert client.url == BASE


def test_upsert_agent(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.put(f"{WS}/job-agents/{AGENT}").respond(202, json=wire.accepted("ok"))
    result = client.upsert_agent(AGENT, "builder", "shell", {"leaseSeconds": 30})
    assert result.message == "ok"
    assert sent(route) == {"name": "builder", "type": "shell", "config": {"leaseSeconds": 30}}


def test_list_agents(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.get(f"{WS}/job-agents", params={"limit": "10", "offset": "5"}).respond(
        200, json=wire.page([wire.agent()], total=6, limit=10, offset=5)
    )
    page = client.list_agents(limit=10, offset=5)
    assert [a.id for a in page.items] == [AGENT]
    assert (page.total, page.limit, page.offset) == (6, 10, 5)
    assert route.called


def test_delete_agent(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.delete(f"{WS}/job-agents/{AGENT}").respond(202, json=wire.accepted("deleted"))
    assert client.delete_agent(AGENT).message == "deleted"


def test_list_agent_jobs(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(200, json=wire.page([wire.job()]))
    page = client.list_agent_jobs(AGENT, include_dispatch_context=True)
    assert page.items[0].status is JobStatus.QUEUED
    params = route.calls.last.request.url.params
    assert params["status"] == "queued"
    assert params["includeDispatchContext"] == "true"
    client.list_agent_jobs(AGENT, status=None)
    assert "status" not in route.calls.last.request.url.params


def test_list_jobs_and_get_job(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.get(f"{WS}/jobs", params={"status": "failure"}).respond(200, json=wire.page([]))
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job(dispatchContext={"a": 1}))
    assert client.list_jobs(status="failure").items == []
    assert client.get_job(JOB).dispatch_context == {"a": 1}


def test_create_job(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/jobs").respond(201, json=wire.job())
    client.create_job(AGENT, job_agent_config={"x": 1}, metadata={"k": "v"})
    assert sent(route) == {"jobAgentConfig": {"x": 1}, "metadata": {"k": "v"}}


def test_claim_job_sends_lease_or_no_body(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim").respond(
        200, json=wire.claimed()
    )
    claimed = client.claim_job(AGENT, JOB, lease_seconds=90)
    assert isinstance(claimed, ClaimedJob)
    assert (claimed.claim_id, claimed.attempt) == (CLAIM, 1)
    assert sent(route) == {"leaseSeconds": 90}
    client.claim_job(AGENT, JOB, lease_seconds=None)
    assert route.calls.last.request.content == b""


def test_claim_next_long_poll_read_timeout_outlasts_wait(
    mock_api: respx.MockRouter, client: Client
) -> None:
    route = mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(200, json=wire.claimed())
    client.claim_next(AGENT, lease_seconds=60, wait_seconds=25)
    assert sent(route) == {"leaseSeconds": 60, "waitSeconds": 25}
    timeout = route.calls.last.request.extensions["timeout"]
    assert timeout["read"] > 25
    assert timeout["connect"] == 5.0


def test_claim_next_204_is_no_job(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(204)
    with pytest.raises(errors.NoJob) as caught:
        client.claim_next(AGENT, lease_seconds=None, wait_seconds=None)
    assert caught.value.status == 204
    assert errors.exit_code_for(caught.value) == 7


def test_wait_for_job_polls_until_deadline(mock_api: respx.MockRouter, client: Client) -> None:
    now = [0.0]
    waits: list[float] = []
    answers = iter([204, 204, 200])

    def server(request: httpx.Request) -> httpx.Response:
        waits.append(json.loads(request.content)["waitSeconds"])
        now[0] += 30.0  # each long-poll runs to the server's cap
        status = next(answers)
        return httpx.Response(status, json=wire.claimed() if status == 200 else None)

    def no_sleep(seconds: float) -> None:
        pytest.fail(f"slept {seconds}s between long-polls")

    mock_api.post(f"{WS}/job-agents/{AGENT}/claim").mock(side_effect=server)
    claimed = client.wait_for_job(
        AGENT, lease_seconds=60, wait_seconds=100, clock=lambda: now[0], sleep=no_sleep
    )
    assert claimed.claim_id == CLAIM
    assert waits == [100, 70, 40]


def test_wait_for_job_gives_up_with_no_job(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/claim").respond(204)
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with pytest.raises(errors.NoJob):
        client.wait_for_job(
            AGENT, lease_seconds=60, wait_seconds=2.5, clock=lambda: now[0], sleep=sleep
        )
    # The server answered at once although asked to wait: the client paced itself.
    assert slept == [1.0, 1.0, 0.5]


def test_heartbeat(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(200, json=wire.heartbeat())
    beat = client.heartbeat(JOB, claim_id=CLAIM)
    assert beat.lease_seconds == 60
    assert sent(route) == {"claimId": str(CLAIM)}
    client.heartbeat(JOB, claim_id=None, lease_seconds=120)
    assert sent(route) == {"leaseSeconds": 120}


def test_update_status_and_release(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.put(f"{WS}/jobs/{JOB}/status").respond(202, json=wire.accepted())
    client.update_status(
        JOB, "successful", claim_id=CLAIM, message="done", external_id="run-1", metadata={"a": "b"}
    )
    assert sent(route) == {
        "status": "successful",
        "claimId": str(CLAIM),
        "message": "done",
        "externalId": "run-1",
        "metadata": {"a": "b"},
    }
    client.release(JOB, claim_id=CLAIM)
    assert sent(route) == {"status": "queued", "claimId": str(CLAIM)}


def test_update_status_rejects_unknown_status_locally(client: Client) -> None:
    with pytest.raises(errors.ConfigError):
        client.update_status(JOB, "done")


def test_list_claims(mock_api: respx.MockRouter, client: Client) -> None:
    route = mock_api.get(f"{WS}/job-claims").respond(
        200, json=wire.page([wire.claim_row("expired"), wire.claim_row("unleased")])
    )
    page = client.list_claims(agent_id=AGENT, state="expired")
    assert [c.state for c in page.items] == ["expired", "unleased"]
    assert page.items[1].claim_id is None
    params = route.calls.last.request.url.params
    assert (params["jobAgentId"], params["state"]) == (str(AGENT), "expired")


def test_list_attempts(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}/attempts").respond(
        200, json=[wire.attempt(1), wire.attempt(2, None)]
    )
    attempts = client.list_attempts(JOB)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "expired"), (2, None)]


def test_iter_pages_follows_total() -> None:
    from jobagentctl.models import Page

    data = list(range(7))
    calls: list[tuple[int, int]] = []

    def fetch(limit: int, offset: int) -> Page[int]:
        calls.append((limit, offset))
        return Page[int](items=data[offset : offset + limit], total=7, limit=limit, offset=offset)

    assert list(iter_pages(fetch, limit=3)) == data
    assert calls == [(3, 0), (3, 3), (3, 6)]


def test_iter_cursor_pages_follows_the_cursor_else_offsets() -> None:
    from jobagentctl.models import Page

    data = list(range(7))
    calls: list[tuple[int, int, str | None]] = []

    def by_cursor(limit: int, offset: int, cursor: str | None) -> Page[int]:
        calls.append((limit, offset, cursor))
        start = 0 if cursor is None else int(cursor)
        rest = data[start : start + limit]
        following = str(start + limit) if start + limit < len(data) else None
        return Page[int].from_wire(
            {"items": rest, "total": 7, "limit": limit, "offset": 0, "nextCursor": following}
        )

    assert list(iter_cursor_pages(by_cursor, limit=3)) == data
    assert calls == [(3, 0, None), (3, 0, "3"), (3, 0, "6")]

    calls.clear()

    def by_offset(limit: int, offset: int, cursor: str | None) -> Page[int]:  # ctrlplane
        calls.append((limit, offset, cursor))
        page = {"items": data[offset : offset + limit], "total": 7, "limit": limit}
        return Page[int].from_wire({**page, "offset": offset})

    assert list(iter_cursor_pages(by_offset, limit=3)) == data
    assert calls == [(3, 0, None), (3, 3, None), (3, 6, None)]


# --- the workspace: a UUID, or a slug resolved once ----------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        {"id": str(WORKSPACE)},  # a server that sends only the id
        {"id": str(WORKSPACE), "name": "Team A", "slug": "team-a", "createdAt": wire.T0},
        {"id": str(WORKSPACE), "slug": "team-a", "settings": {"x": 1}},  # ctrlplane's wider one
    ],
)
def test_a_slug_is_resolved_once_from_any_workspace_shape(
    mock_api: respx.MockRouter, answer: dict[str, Any]
) -> None:
    lookup = mock_api.get(f"{BASE}/api/v1/workspaces/slug/team-a").respond(200, json=answer)
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job())
    for _ in range(2):  # another client of the same process asks no more
        with Client(BASE, API_KEY, " team-a ", ConnectionOptions(timeout=5)) as c:
            assert c.workspace == "team-a"
            assert c.workspace_id() == WORKSPACE
            c.get_job(JOB)
    assert lookup.call_count == 1


def test_a_workspace_given_as_text_uuid_needs_no_look_up() -> None:
    with Client(BASE, API_KEY, f" {WORKSPACE} ", ConnectionOptions(timeout=5)) as c:
        assert c.workspace == WORKSPACE and c.workspace_id() == WORKSPACE
    with Client(BASE, API_KEY, "   ") as c:
        assert c.workspace is None


def test_a_slug_is_one_path_segment(mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{BASE}/api/v1/workspaces/slug/a%2F..%3Fb").respond(
        404, json=wire.error("NOT_FOUND")
    )
    with (
        Client(BASE, API_KEY, "a/..?b") as c,
        pytest.raises(errors.NotFound, match=re.escape("no workspace with slug 'a/..?b'")),
    ):
        c.list_agents()
    assert route.called


def test_a_workspace_without_an_id_is_a_protocol_error(mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{BASE}/api/v1/workspaces/slug/team-a").respond(200, json={"name": "Team A"})
    with Client(BASE, API_KEY, "team-a") as c, pytest.raises(errors.ProtocolError, match="id"):
        c.workspace_id()


# --- ctrlplane V1 shapes ----------------------------------------------------------------------


def test_v1_claim_without_lease_fields(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(f"{WS}/job-agents/{AGENT}/jobs/{JOB}/claim").respond(
        200, json=wire.job(status="inProgress", startedAt=wire.T0, somethingNew=True)
    )
    claimed = client.claim_job(AGENT, JOB, lease_seconds=60)
    assert claimed.claim_id is None and claimed.lease_seconds is None and claimed.attempt is None


def test_v1_list_without_v2_fields(mock_api: respx.MockRouter, client: Client) -> None:
    v1_job = wire.job()
    del v1_job["metadata"]  # be lenient with older servers
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(200, json=wire.page([v1_job]))
    assert client.list_agent_jobs(AGENT).items[0].metadata == {}


@pytest.mark.parametrize(
    ("method", "path", "call"),
    [
        ("POST", f"/jobs/{JOB}/heartbeat", lambda c: c.heartbeat(JOB, claim_id=CLAIM)),
        # claim-next falls back to V1 instead: tests/integration/ctrlplane/test_client_v1.py
        ("GET", "/job-claims", lambda c: c.list_claims()),
        ("GET", f"/jobs/{JOB}/attempts", lambda c: c.list_attempts(JOB)),
    ],
)
@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(404, json={"error": "Not found"}),  # ctrlplane's shape
        httpx.Response(404, text="<!DOCTYPE html><html>404</html>"),
        httpx.Response(405, text=""),
    ],
)
def test_v1_server_has_no_lease_routes(
    mock_api: respx.MockRouter,
    client: Client,
    method: str,
    path: str,
    call: Any,
    response: httpx.Response,
) -> None:
    mock_api.route(method=method, url=f"{WS}{path}").mock(return_value=response)
    with pytest.raises(errors.LeaseUnsupported, match="server has no lease support"):
        call(client)


def test_our_404_on_a_v2_route_is_not_found(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(404, json=wire.error("NOT_FOUND", "no job"))
    with pytest.raises(errors.NotFound, match="no job"):
        client.heartbeat(JOB, claim_id=CLAIM)


# --- every error class ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "cls", "status"),
    [
        (httpx.Response(401, json=wire.error("UNAUTHORIZED", "bad key")), errors.AuthError, 401),
        (httpx.Response(403, json={"error": "Forbidden"}), errors.AuthError, 403),
        (httpx.Response(404, json=wire.error("NOT_FOUND")), errors.NotFound, 404),
        (httpx.Response(404, text="Not Found"), errors.NotFound, 404),
        (httpx.Response(400, json=wire.error("VALIDATION_ERROR")), errors.ValidationError, 400),
        (httpx.Response(422, json={"detail": "bad"}), errors.ValidationError, 422),
        (httpx.Response(413, text="too big"), errors.PayloadTooLarge, 413),
        (httpx.Response(409, json=wire.error("NOT_CLAIMABLE")), errors.NotClaimable, 409),
        (httpx.Response(409, json=wire.error("CLAIM_LOST")), errors.ClaimLost, 409),
        (httpx.Response(409, json=wire.error("CLAIM_MISMATCH")), errors.ClaimMismatch, 409),
        (httpx.Response(409, json=wire.error("JOB_TERMINAL")), errors.JobTerminal, 409),
        (httpx.Response(409, json=wire.error("SOMETHING_NEW")), errors.Conflict, 409),
        (httpx.Response(409, text=""), errors.Conflict, 409),
        (httpx.Response(500, json=wire.error("INTERNAL_ERROR")), errors.ServerError, 500),
        (httpx.Response(500, text="boom"), errors.ServerError, 500),
        (httpx.Response(501, text=""), errors.ServerError, 501),
        (httpx.Response(502, text="<html>bad gateway</html>"), errors.ServerUnavailable, 502),
        (
            httpx.Response(503, json=wire.error("SERVICE_UNAVAILABLE")),
            errors.ServerUnavailable,
            503,
        ),
        (httpx.Response(504, text=""), errors.ServerUnavailable, 504),
        (httpx.Response(429, text="slow down"), errors.ServerUnavailable, 429),
        (httpx.Response(408, text=""), errors.ServerUnavailable, 408),
        (httpx.Response(302, headers={"location": "https://login"}), errors.ProtocolError, 302),
        (httpx.Response(418, text="teapot"), errors.ProtocolError, 418),
    ],
)
def test_status_translation(
    mock_api: respx.MockRouter, client: Client, response: httpx.Response, cls: type, status: int
) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").mock(return_value=response)
    with pytest.raises(errors.JobAgentError) as caught:
        client.get_job(JOB)
    assert type(caught.value) is cls
    assert caught.value.status == status
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)
    assert API_KEY not in str(caught.value)


def test_conflict_keeps_details(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(f"{WS}/jobs/{JOB}/heartbeat").respond(
        409, json=wire.error("CLAIM_LOST", "claim gone", {"jobStatus": "cancelled"})
    )
    with pytest.raises(errors.ClaimLost) as caught:
        client.heartbeat(JOB, claim_id=CLAIM)
    assert caught.value.details == {"jobStatus": "cancelled"}
    assert caught.value.job_status == "cancelled"
    assert caught.value.message == "claim gone"


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("Connection refused"),
        httpx.ConnectTimeout("timed out"),
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.ReadError("reset"),
    ],
)
def test_transport_errors_are_server_unavailable(
    mock_api: respx.MockRouter, client: Client, exc: Exception
) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").mock(side_effect=exc)
    with pytest.raises(errors.ServerUnavailable) as caught:
        client.get_job(JOB)
    assert caught.value.__cause__ is not None
    assert errors.exit_code_for(caught.value) == 3
    assert API_KEY not in str(caught.value)


def test_real_connection_refused_is_server_unavailable() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with (
        Client(f"http://127.0.0.1:{port}", API_KEY, WORKSPACE, ConnectionOptions(timeout=5)) as c,
        pytest.raises(
            errors.ServerUnavailable, match=f"cannot reach the server at http://127.0.0.1:{port}"
        ),
    ):
        c.get_job(JOB)


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="{not json"),
        httpx.Response(200, text="<html>login page</html>"),
        httpx.Response(200, json={"id": "not-a-uuid"}),
        httpx.Response(200, json=[1, 2]),
        httpx.Response(204),
    ],
)
def test_malformed_or_unexpected_body_is_protocol_error(
    mock_api: respx.MockRouter, client: Client, response: httpx.Response
) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").mock(return_value=response)
    with pytest.raises(errors.ProtocolError) as caught:
        client.get_job(JOB)
    assert caught.value.__cause__ is not None


def test_missing_key_fails_before_any_request(mock_api: respx.MockRouter) -> None:
    route = mock_api.get(f"{WS}/jobs/{JOB}")
    mock_api._assert_all_called = False
    for key in (None, "", "   "):
        with Client(BASE, key, WORKSPACE) as c, pytest.raises(errors.AuthError, match="no API key"):
            c.get_job(JOB)
    assert not route.called


def test_missing_workspace_is_a_config_error() -> None:
    with Client(BASE, API_KEY, None) as c, pytest.raises(errors.ConfigError, match="workspace"):
        c.get_job(JOB)


@pytest.mark.parametrize("url", ["ftp://x", "nohost", "http://"])
def test_bad_url_is_a_config_error(url: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid server URL"):
        Client(url, API_KEY, WORKSPACE)


def test_key_not_in_repr() -> None:
    with Client(BASE, API_KEY, WORKSPACE) as c:
        assert API_KEY not in repr(c)
        assert API_KEY not in repr(vars(c))


def test_debug_trace_redacts_key(mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job())
    lines: list[str] = []
    with Client(BASE, API_KEY, WORKSPACE, ConnectionOptions(trace=lines.append)) as c:
        c.get_job(JOB)
    text = "\n".join(lines)
    assert f"> GET {WS}/jobs/{JOB}" in text
    assert "x-api-key: <redacted>" in text.lower()
    assert "< 200 OK" in text
    assert "s3cr3t" not in text


def test_injected_transport_is_used() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, json=wire.job())

    with Client(
        BASE, API_KEY, WORKSPACE, ConnectionOptions(transport=httpx.MockTransport(handler))
    ) as c:
        c.get_job(JOB)
    assert seen == [f"/api/v1/workspaces/{WORKSPACE}/jobs/{JOB}"]


def test_translate_passes_project_errors_through() -> None:
    err = errors.NoJob("x")
    assert translate(err) is err
