"""The log endpoints (``…/jobs/{id}/logs``) against respx: the append body, the read's
parameters and timeout, the follow loop, and servers without the endpoint (learned once)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import respx

from jobagentctl import errors
from jobagentctl.client import Client, iter_log_pages
from jobagentctl.models import LogChunkIn, LogPage, LogStream
from tests.fixtures.wire import CLAIM, JOB, T0, WS

RESPX_ASSERT_ALL_CALLED = True
LOGS = f"{WS}/jobs/{JOB}/logs"


def page(*seqs: int, ended: bool = False, attempt: int = 1) -> dict[str, Any]:
    chunks = [
        {
            "seq": s,
            "offset": s,
            "stream": "stdout",
            "at": T0,
            "data": base64.b64encode(b"x").decode(),
        }
        for s in seqs
    ]
    return {
        "jobId": str(JOB),
        "attempt": attempt,
        "chunks": chunks,
        "nextSeq": (seqs[-1] + 1) if seqs else 1,
        "ended": ended,
        "outcome": "completed" if ended else None,
        "jobStatus": "successful" if ended else "inProgress",
    }


def test_append_sends_base64_chunks_under_the_claim(
    mock_api: respx.MockRouter, client: Client
) -> None:
    answer = {"jobId": str(JOB), "attempt": 2, "nextSeq": 3, "storedBytes": 5, "truncated": False}
    route = mock_api.post(LOGS).respond(200, json=answer)
    at = datetime(2024, 5, 1, 12, tzinfo=UTC)
    chunks = [
        LogChunkIn.of(LogStream.STDOUT, at, b"ok\n"),
        LogChunkIn.of(LogStream.STDERR, at, b"\xff"),
    ]
    got = client.append_logs(JOB, CLAIM, chunks)
    assert (got.attempt, got.next_seq, got.truncated) == (2, 3, False)
    sent = json.loads(route.calls.last.request.content)
    assert sent["claimId"] == str(CLAIM)
    assert [(c["stream"], base64.b64decode(c["data"])) for c in sent["chunks"]] == [
        ("stdout", b"ok\n"),
        ("stderr", b"\xff"),
    ]


def test_read_passes_the_cursor_and_outlasts_the_wait(
    mock_api: respx.MockRouter, client: Client
) -> None:
    route = mock_api.get(LOGS).respond(200, json=page(3))
    got = client.read_logs(JOB, attempt=1, after=2, wait_seconds=25)
    assert [c.raw() for c in got.chunks] == [b"x"]
    request = route.calls.last.request
    assert dict(request.url.params) == {"attempt": "1", "after": "2", "waitSeconds": "25"}
    assert request.extensions["timeout"]["read"] > 25


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, {"message": "not found", "code": "Not Found", "path": "/x"}),  # ctrlplane
        (405, {"error": "Method Not Allowed"}),
        (404, {"message": "not found", "code": "NOT_FOUND", "details": None}),  # older ours
    ],
)
def test_a_server_without_logs_is_unsupported_once(
    mock_api: respx.MockRouter, client: Client, status: int, body: dict[str, Any]
) -> None:
    route = mock_api.get(LOGS).respond(status, json=body)
    with pytest.raises(errors.LogsUnsupported) as caught:
        client.read_logs(JOB)
    assert "no log support" in caught.value.message
    assert "(" not in caught.value.message  # run wraps it in parentheses of its own
    assert caught.value.exit_code == 1
    with pytest.raises(errors.LogsUnsupported):
        client.append_logs(JOB, CLAIM, [])
    assert route.call_count == 1


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [(404, "LOG_NOT_FOUND", errors.LogNotFound), (410, "LOG_EXPIRED", errors.LogExpired)],
)
def test_our_answers_are_not_unsupported(
    mock_api: respx.MockRouter, client: Client, status: int, code: str, error: type[Exception]
) -> None:
    body = {"message": "m", "code": code, "details": {"jobId": str(JOB)}}
    route = mock_api.get(LOGS).respond(status, json=body)
    for _ in range(2):
        with pytest.raises(error) as caught:
            client.read_logs(JOB)
        assert isinstance(caught.value, errors.NotFound) and caught.value.exit_code == 5
    assert route.call_count == 2


def test_follow_reads_to_the_end_of_an_ended_attempt() -> None:
    answers = [page(1, 2), page(), page(3, ended=True), page(ended=True)]
    asked: list[tuple[int | None, int, float | None]] = []

    def read(attempt: int | None, after: int, wait: float | None) -> Any:
        asked.append((attempt, after, wait))
        return LogPage.from_wire(answers.pop(0))

    pages = list(iter_log_pages(read, follow=True, wait_seconds=5))
    assert [len(p.chunks) for p in pages] == [2, 0, 1, 0]
    assert asked == [(None, 0, 5), (1, 2, 5), (1, 2, 5), (1, 3, 5)]


def test_without_follow_reading_stops_at_the_first_empty_page() -> None:
    answers = [page(1), page()]

    def read(attempt: int | None, after: int, wait: float | None) -> Any:
        assert wait is None
        return LogPage.from_wire(answers.pop(0))

    assert [len(p.chunks) for p in iter_log_pages(read)] == [1, 0]
