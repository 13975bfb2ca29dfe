"""The stand-in answers what ctrlplane's real API server answered (``apps/api`` at commit
66e0888, brought up by ../shared/ctrlplane/up.sh): the bodies below were read from it, with
its ids replaced by the stand-in's. The client reads these bodies, so the stand-in must not
drift from them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn

STATUSES = (
    "cancelled, skipped, inProgress, actionRequired, pending, failure, invalidJobAgent, "
    "invalidIntegration, externalRunNotFound, successful, queued"
)


def schema_400(where: str, problem: str, keyword: str) -> dict[str, Any]:
    detail = {"path": f"/{where}", "message": problem, "errorCode": f"{keyword}.openapi.validation"}
    return {"message": f"request/{where} {problem}", "code": "Bad Request", "details": [detail]}


def test_bodies_match_the_real_server(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    ws = f"/api/v1/workspaces/{ctrlplane.workspace_id}"
    job = ctrlplane.seed_job(agent)
    key = {"X-API-Key": ctrlplane.api_key}
    cases: list[tuple[str, str, dict[str, str], Any, int, Any]] = [
        ("GET", f"{ws}/jobs?limit=0", key, None, 400,
         schema_400("query/limit", "must be >= 1", "minimum")),
        ("GET", f"{ws}/jobs?limit=abc", key, None, 400,
         schema_400("query/limit", "must be integer", "type")),
        ("GET", f"{ws}/job-agents?offset=-1", key, None, 400,
         schema_400("query/offset", "must be >= 0", "minimum")),
        ("GET", f"{ws}/job-agents/{agent}/jobs?includeDispatchContext=maybe", key, None, 400,
         schema_400("query/includeDispatchContext", "must be boolean", "type")),
        ("GET", f"{ws}/job-agents/{agent}/jobs?status=bogus", key, None, 400,
         schema_400("query/status", f"must be equal to one of the allowed values: {STATUSES}",
                    "enum")),
        ("PUT", f"{ws}/job-agents/{agent}", key, {"name": "x"}, 400,
         {**schema_400("body", "must have required property 'type'", "required"),
          "details": [{"path": "/body/type", "message": "must have required property 'type'",
                       "errorCode": "required.openapi.validation"}]}),
        ("PUT", f"{ws}/job-agents/{agent}", key, {"name": "x", "type": "t", "config": "s"}, 400,
         schema_400("body/config", "must be object", "type")),
        ("PUT", f"{ws}/jobs/{job}/status", key, [1], 400,
         schema_400("body", "must be object", "type")),
        ("GET", f"{ws}/jobs?status=queued", key, None, 400,
         {"message": "Unknown query parameter 'status'", "code": "Bad Request",
          "details": [{"path": "/query/status", "message": "Unknown query parameter 'status'"}]}),
        ("GET", f"{ws}/jobs?limit=0", {}, None, 401,
         {"message": "'X-API-Key' header required", "code": "Unauthorized",
          "details": [{"path": "/api/v1/workspaces/{workspaceId}/jobs",
                       "message": "'X-API-Key' header required"}]}),
        ("GET", f"{ws}/jobs", {"X-API-Key": "nope"}, None, 401,
         {"message": "Authentication failed", "code": "AUTH_FAILED"}),
        ("GET", "/api/v1/nothing", {}, None, 404,
         {"message": "not found", "code": "Not Found",
          "details": [{"path": "/api/v1/nothing", "message": "not found"}]}),
        ("GET", f"/api/v1/workspaces/slug/{ctrlplane.workspace_slug}", key, None, 200,
         {"id": ctrlplane.workspace_id, "name": "Acme", "slug": ctrlplane.workspace_slug}),
        ("GET", "/api/v1/workspaces/slug/nope-nope", key, None, 404,
         {"message": "Workspace not found", "code": "NOT_FOUND"}),
    ]  # fmt: skip
    with httpx.Client(base_url=ctrlplane.url) as client:
        for method, path, headers, body, status, expected in cases:
            r = client.request(method, path, headers=headers, json=body)
            assert r.status_code == status, (method, path, r.text)
            got = r.json()
            if "createdAt" in got:  # the slug lookup's: an ISO timestamp, as ctrlplane's
                assert got.pop("createdAt").endswith("Z")
            assert got == expected, (method, path)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_paths_outside_api_answer_expresss_html_page(
    ctrlplane: CtrlplaneStandIn, method: str
) -> None:
    r = httpx.request(method, f"{ctrlplane.url}/foo")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert f"<pre>Cannot {method} /foo</pre>" in r.text


def test_a_job_without_release_is_claimable_but_not_found_by_id(
    ctrlplane: CtrlplaneStandIn,
) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, release=False)
    ws = f"/api/v1/workspaces/{ctrlplane.workspace_id}"
    with httpx.Client(base_url=ctrlplane.url, headers={"X-API-Key": ctrlplane.api_key}) as c:
        for r in (
            c.get(f"{ws}/jobs/{job}"),
            c.put(f"{ws}/jobs/{job}/status", json={"status": "failure"}),
        ):
            assert (r.status_code, r.json()) == (404, {"message": "Job not found"})
        claimed = c.post(f"{ws}/job-agents/{agent}/jobs/{job}/claim")
        assert claimed.status_code == 200 and claimed.json()["releaseId"] == ""
