"""The operational surface: OpenAPI document, /healthz, /readyz, /metrics."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.server_app import Api, make_api, open_api

pytestmark = pytest.mark.anyio

# Every method and path of the API the product contract lists (relative to /api).
SPEC_ENDPOINTS = [
    ("put", "/v1/workspaces/{ws}/job-agents/{agentId}"),
    ("get", "/v1/workspaces/{ws}/job-agents"),
    ("get", "/v1/workspaces/{ws}/job-agents/{agentId}"),
    ("delete", "/v1/workspaces/{ws}/job-agents/{agentId}"),
    ("get", "/v1/workspaces/{ws}/job-agents/{agentId}/jobs"),
    ("post", "/v1/workspaces/{ws}/job-agents/{agentId}/jobs/{jobId}/claim"),
    ("get", "/v1/workspaces/{ws}/jobs"),
    ("get", "/v1/workspaces/{ws}/jobs/{jobId}"),
    ("put", "/v1/workspaces/{ws}/jobs/{jobId}/status"),
    ("post", "/v1/workspaces/{ws}/job-agents/{agentId}/claim"),
    ("post", "/v1/workspaces/{ws}/jobs/{jobId}/heartbeat"),
    ("get", "/v1/workspaces/{ws}/job-claims"),
    ("get", "/v1/workspaces/{ws}/jobs/{jobId}/attempts"),
    ("post", "/v1/workspaces/{ws}/job-agents/{agentId}/jobs"),
]


async def test_openapi_document_has_every_spec_path(api: Api) -> None:
    r = await api.client.get("/api/openapi.json")  # no key needed
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for method, path in SPEC_ENDPOINTS:
        assert "/api" + path in paths, path
        assert method in paths["/api" + path], (method, path)
    assert doc["components"]["securitySchemes"]["ApiKey"]["name"] == "X-API-Key"
    claim = paths["/api/v1/workspaces/{ws}/job-agents/{agentId}/claim"]["post"]
    assert "204" in claim["responses"]
    assert claim["security"] == [{"ApiKey": []}]
    assert {p["name"] for p in claim["parameters"]} == {"ws", "agentId"}
    listing = paths["/api/v1/workspaces/{ws}/job-agents/{agentId}/jobs"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"status", "includeDispatchContext", "limit", "offset"} <= names


async def test_healthz_and_readyz(api: Api) -> None:
    r = await api.client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}
    r = await api.client.get("/readyz")
    assert r.status_code == 200
    api.app.framework.state.service.begin_shutdown()
    r = await api.client.get("/readyz")  # a draining server tells load balancers to go away
    assert r.status_code == 503
    assert r.json()["code"] == "SERVICE_UNAVAILABLE"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_count_claims_heartbeats_reaps_and_lost_leases(api: Api) -> None:
    agent = await api.agent()
    jobs = [await api.enqueue(agent) for _ in range(3)]
    first = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    second = (await api.claim(agent, jobs[1]["id"], {"leaseSeconds": 30})).json()
    assert (await api.heartbeat(first["id"], {"claimId": first["claimId"]})).status_code == 200
    await api.expire(second["id"])

    r = await api.client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = _samples(r.text)
    assert samples[("jobagentctl_active_claims", ())] == 1
    assert samples[("jobagentctl_expired_claims", ())] == 1
    assert samples[("jobagentctl_oldest_claim_age_seconds", ())] >= 0

    await api.reap()
    # A reap seen by the reaper task is counted; a direct store.reap() is not: use the task's.
    await api.expire(first["id"])
    assert (await api.app.framework.state.reaper.run_once()).requeued == 1
    lost = await api.heartbeat(first["id"], {"claimId": first["claimId"]})
    assert lost.status_code == 409

    samples = _samples((await api.client.get("/metrics")).text)
    claims = [v for (name, _), v in samples.items() if name == "jobagentctl_claims_total"]
    assert sum(claims) == 2
    assert samples[("jobagentctl_heartbeats_total", ())] == 1
    assert samples[("jobagentctl_reaped_total", (("outcome", "requeued"),))] == 1
    assert samples[("jobagentctl_lease_lost_rejections_total", (("code", "CLAIM_LOST"),))] == 1
    assert samples[("jobagentctl_active_claims", ())] == 0
    latency = [
        labels
        for (name, labels), _ in samples.items()
        if name == "jobagentctl_http_request_duration_seconds_count"
    ]
    routes = {dict(labels)["route"] for labels in latency}
    assert "/api/v1/workspaces/{ws}/jobs/{jobId}/heartbeat" in routes
    statuses = {dict(labels)["status"] for labels in latency}
    assert {"200", "409"} <= statuses


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT")


async def _scenario(api: Api) -> list[tuple[int, Any]]:
    """The hot calls, good and bad; ids replaced by placeholders so two runs compare."""
    agent = await api.agent()
    other_agent = await api.agent("other")
    job = await api.enqueue(agent, dispatchContext={"k": "v"})
    second = await api.enqueue(agent)
    theirs = await api.enqueue(other_agent)
    ids = {agent: "AGENT", job["id"]: "JOB", second["id"]: "JOB2", api.workspace_id: "WS"}
    agent_key = await api.new_key(agent)
    out: list[tuple[int, Any]] = []

    def norm(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: norm(v) for k, v in value.items()}
        if isinstance(value, list):
            return [norm(v) for v in value]
        if isinstance(value, str):
            if value in ids:
                return ids[value]
            if _UUID.fullmatch(value):
                return "<uuid>"
            if _TIME.match(value):
                return "<time>"
            for known, name in ids.items():
                value = value.replace(known, name)
        return value

    def record(r: httpx.Response) -> None:
        out.append((r.status_code, norm(r.json()) if r.content else None))

    claimed = (await api.claim_next(agent, {"leaseSeconds": 30})).json()
    ids[claimed["claimId"]] = "CLAIM"
    record(await api.claim_next(agent, {"leaseSeconds": 30}))
    record(await api.claim(agent, job["id"], {"leaseSeconds": 30}))  # 409 NOT_CLAIMABLE
    record(await api.claim(agent, theirs["id"]))  # 404
    record(await api.claim(agent, job["id"], {"leaseSeconds": "x"}))  # 400
    record(await api.heartbeat(job["id"], {"claimId": claimed["claimId"]}))
    record(await api.heartbeat(job["id"], {"claimId": claimed["claimId"]}, key="bad.key"))
    record(await api.heartbeat(theirs["id"], None, key=agent_key))  # 404
    record(await api.heartbeat(job["id"], {"claimId": "not-a-uuid"}))  # 400
    record(await api.status(job["id"], {"status": "nope"}))  # 400
    record(await api.status(job["id"], {"status": "successful", "claimId": claimed["claimId"]}))
    record(await api.status(job["id"], {"status": "failure"}))  # 202: V1 parity, any transition
    record(await api.heartbeat(job["id"], {"claimId": claimed["claimId"]}))  # 409 CLAIM_LOST
    r = await api.client.put(
        api.path(f"jobs/{job['id']}/status"), headers={"X-API-Key": api.api_key}
    )
    record(r)  # no body: 400
    record(await api.claim_next(agent, {"waitSeconds": 0}))  # 204
    return out


async def test_fast_path_and_framework_answer_the_same(
    database_url: str, anyio_backend: str
) -> None:
    async with open_api(database_url) as api:
        fast_path = api.app.fast_path
        assert fast_path is not None
        served = []
        serve = fast_path.serve

        async def counting(*args: Any) -> Any:
            try:
                result = await serve(*args)
            except Exception:
                served.append(args[0].endpoint.template)  # an error answered by the fast path
                raise
            if result is not None:  # None: handed to the framework
                served.append(args[0].endpoint.template)
            return result

        fast_path.serve = counting
        fast = await _scenario(api)
        assert len(served) >= 10  # the hot calls took the fast path
    async for api in make_api(database_url, fast_path=False):
        assert api.app.fast_path is None  # every request through FastAPI's routing
        framework = await _scenario(api)
    assert [status for status, _ in fast] == [
        200,
        409,
        404,
        400,
        200,
        401,
        404,
        400,
        400,
        202,
        202,
        409,
        400,
        204,
    ]
    assert fast == framework
