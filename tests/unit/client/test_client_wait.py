"""The claim long-poll (``POST …/jobs/{id}/wait``) against respx: the body, the
read timeout, the answers, and servers without the endpoint (learned once per process)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from jobagentctl import errors
from jobagentctl.client import Client
from jobagentctl.models import JobStatus
from tests.fixtures.wire import API_KEY, CLAIM, JOB, WS

RESPX_ASSERT_ALL_CALLED = True
WAIT = f"{WS}/jobs/{JOB}/wait"


def answer(*, held: bool, status: str = "inProgress") -> dict[str, Any]:
    return {"jobId": str(JOB), "status": status, "claimHeld": held}


def test_sends_the_claim_and_the_wait_and_reads_past_the_wait(
    mock_api: respx.MockRouter, client: Client
) -> None:
    route = mock_api.post(WAIT).respond(200, json=answer(held=True))
    got = client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=30)
    assert (got.job_id, got.status, got.claim_held) == (JOB, JobStatus.IN_PROGRESS, True)
    request = route.calls.last.request
    assert json.loads(request.content) == {"claimId": str(CLAIM), "waitSeconds": 30.0}
    assert request.headers["X-API-Key"] == API_KEY
    timeout = request.extensions["timeout"]
    assert timeout["read"] > 30  # a healthy long-poll is never cut short by the client
    assert timeout["connect"] == 5.0


def test_a_cancelled_claim_is_not_held(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(WAIT).respond(200, json=answer(held=False, status="cancelled"))
    got = client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=5)
    assert (got.status, got.claim_held) == (JobStatus.CANCELLED, False)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, {"message": "not found", "code": "Not Found", "path": "/x"}),  # ctrlplane
        (405, {"error": "Method Not Allowed"}),
        (404, {"message": "not found", "code": "NOT_FOUND", "details": None}),  # older ours
    ],
)
def test_a_server_without_the_endpoint_is_unsupported_once(
    mock_api: respx.MockRouter, client: Client, status: int, body: dict[str, Any]
) -> None:
    route = mock_api.post(WAIT).respond(status, json=body)
    with pytest.raises(errors.LeaseUnsupported) as caught:
        client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=5)
    assert "no claim long-poll" in caught.value.message
    assert caught.value.status == status
    # Learned for the process: the next job's watch does not ask again.
    with pytest.raises(errors.LeaseUnsupported):
        client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=5)
    assert route.call_count == 1


def test_an_unknown_job_is_not_found_not_unsupported(
    mock_api: respx.MockRouter, client: Client
) -> None:
    body = {"message": "job not found", "code": "NOT_FOUND", "details": {"jobId": str(JOB)}}
    route = mock_api.post(WAIT).respond(404, json=body)
    for _ in range(2):
        with pytest.raises(errors.NotFound):
            client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=5)
    assert route.call_count == 2


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(401, json={"message": "bad key", "code": "UNAUTHORIZED"}), "AuthError"),
        (httpx.Response(503, text="busy"), "ServerUnavailable"),
        (httpx.Response(200, json={"jobId": str(JOB)}), "ProtocolError"),
    ],
)
def test_errors_are_project_errors(
    mock_api: respx.MockRouter, client: Client, response: httpx.Response, error: str
) -> None:
    mock_api.post(WAIT).mock(return_value=response)
    with pytest.raises(errors.JobAgentError) as caught:
        client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=5)
    assert type(caught.value).__name__ == error


def test_a_read_timeout_is_transient(mock_api: respx.MockRouter, client: Client) -> None:
    mock_api.post(WAIT).mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(errors.ServerUnavailable):
        client.wait_claim(JOB, claim_id=CLAIM, wait_seconds=5)
