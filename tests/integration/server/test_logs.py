"""Job logs: POST/GET /v1/workspaces/{ws}/jobs/{jobId}/logs — fencing, limits, bytes kept
exactly, the cap (head + marker + newest), retention (410), and the follow long-poll."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from tests.fixtures.server_app import Api, make_api

pytestmark = pytest.mark.anyio

AT = "2026-01-02T03:04:05.678Z"


def _chunk(data: bytes, stream: str = "stdout") -> dict[str, Any]:
    return {"stream": stream, "at": AT, "data": base64.b64encode(data).decode()}


async def _append(api: Api, job: dict[str, Any], *chunks: dict[str, Any], **kw: Any) -> Any:
    body = {"claimId": kw.pop("claim_id", job["claimId"]), "chunks": list(chunks)}
    return await api.call("POST", f"jobs/{job['id']}/logs", body, **kw)


async def _read(api: Api, job_id: str, **params: Any) -> Any:
    return await api.call("GET", f"jobs/{job_id}/logs", params=params)


async def test_append_then_read_keeps_bytes_exactly(api: Api) -> None:
    job = await api.claimed_job()
    raw = b"caf\xc3\xa9 \xff\xfe\x00 not utf-8\n"
    r = await _append(api, job, _chunk(b"hello\n"), _chunk(raw, "stderr"))
    assert r.status_code == 200, r.text
    assert r.json() == {
        "jobId": job["id"],
        "attempt": 1,
        "nextSeq": 3,
        "storedBytes": 6 + len(raw),
        "truncated": False,
    }
    r = await _read(api, job["id"])
    assert r.status_code == 200, r.text
    page = r.json()
    assert [(c["seq"], c["offset"], c["stream"]) for c in page["chunks"]] == [
        (1, 0, "stdout"),
        (2, 6, "stderr"),
    ]
    assert base64.b64decode(page["chunks"][1]["data"]) == raw
    assert page["chunks"][0]["at"].startswith("2026-01-02T03:04:05.678")
    assert (page["nextSeq"], page["ended"], page["outcome"], page["jobStatus"]) == (
        3,
        False,
        None,
        "inProgress",
    )
    r = await _read(api, job["id"], after=1, attempt=1)
    assert [c["seq"] for c in r.json()["chunks"]] == [2]


async def test_a_stale_claim_writes_nothing(api: Api) -> None:
    job = await api.claimed_job()
    own = await api.new_key(job["jobAgentId"])  # the agent's own key may append
    assert (await _append(api, job, _chunk(b"mine\n"), key=own)).status_code == 200
    released = {"status": "queued", "claimId": job["claimId"]}
    assert (await api.status(job["id"], released)).status_code == 202
    r = await _append(api, job, _chunk(b"late\n"))
    assert r.status_code == 409, r.text
    assert r.json()["code"] == "CLAIM_LOST"
    again = await api.claim_next(job["jobAgentId"], {"leaseSeconds": 30})
    assert again.status_code == 200
    r = await _append(api, job, _chunk(b"late\n"))  # the first attempt's claim id
    assert r.status_code == 409, r.text
    assert r.json()["code"] == "CLAIM_MISMATCH"
    first = (await _read(api, job["id"], attempt=1)).json()
    assert [base64.b64decode(c["data"]) for c in first["chunks"]] == [b"mine\n"]
    second = (await _read(api, job["id"], attempt=2)).json()
    assert second["chunks"] == [] and second["nextSeq"] == 1


async def test_a_cancelled_holder_ships_its_last_lines_until_it_lets_go(api: Api) -> None:
    """An operator cancels a running job: the holder's command prints while it is stopped, and
    those lines reach its attempt's log (a follower waits for them: not ``ended``) until the
    holder reports; then appends are refused and the log has ended."""
    job = await api.claimed_job()
    assert (await _append(api, job, _chunk(b"working\n"))).status_code == 200
    assert (await api.status(job["id"], {"status": "cancelled"})).status_code == 202
    follow = asyncio.ensure_future(_read(api, job["id"], after=1, waitSeconds=30))
    r = await _append(api, job, _chunk(b"rolled back X\n"))
    assert r.status_code == 200, r.text
    page = (await asyncio.wait_for(follow, 30)).json()
    assert [base64.b64decode(c["data"]) for c in page["chunks"]] == [b"rolled back X\n"]
    assert (page["ended"], page["outcome"], page["jobStatus"]) == (False, "cancelled", "cancelled")
    report = {"status": "cancelled", "claimId": job["claimId"]}
    assert (await api.status(job["id"], report)).status_code == 202  # it lets go
    r = await _append(api, job, _chunk(b"late\n"))
    assert r.status_code == 409 and r.json()["code"] == "CLAIM_LOST", r.text
    page = (await _read(api, job["id"])).json()
    assert page["ended"] is True and len(page["chunks"]) == 2


async def test_bad_input(api_each_path: Api) -> None:
    api = api_each_path
    job = await api.claimed_job()
    r = await _append(api, job, _chunk(b"x" * (64 * 1024 + 1)))
    assert r.status_code == 413, r.text
    r = await _append(api, job, {"stream": "stdout", "at": AT, "data": "no*base64"})
    assert r.status_code == 400, r.text
    r = await _append(api, job, _chunk(b"\xff", "marker"))
    assert r.status_code == 400, r.text
    r = await _append(api, job, {"stream": "stdin", "at": AT, "data": ""})
    assert r.status_code == 400, r.text
    assert (await _read(api, job["id"])).json()["chunks"] == []
    unknown = "00000000-0000-4000-8000-000000000000"
    r = await _append(api, {"id": unknown, "claimId": job["claimId"]}, _chunk(b"x"))
    assert r.status_code == 404 and r.json()["code"] == "LOG_NOT_FOUND", r.text
    r = await _read(api, unknown)
    assert r.status_code == 404 and r.json()["code"] == "LOG_NOT_FOUND", r.text
    r = await _read(api, job["id"], attempt=2)
    assert r.status_code == 404 and r.json()["code"] == "LOG_NOT_FOUND", r.text
    r = await api.call("GET", f"jobs/{job['id']}/logs", ws=unknown)
    assert r.status_code == 404 and r.json()["code"] == "LOG_NOT_FOUND", r.text


async def test_follow_wakes_on_append_and_on_end(api: Api) -> None:
    job = await api.claimed_job()
    follow = asyncio.ensure_future(_read(api, job["id"], waitSeconds=30))
    await asyncio.sleep(0.05)
    assert not follow.done()
    assert (await _append(api, job, _chunk(b"line\n"))).status_code == 200
    r = await asyncio.wait_for(follow, 10)
    assert [base64.b64decode(c["data"]) for c in r.json()["chunks"]] == [b"line\n"]
    follow = asyncio.ensure_future(_read(api, job["id"], after=1, waitSeconds=30))
    await asyncio.sleep(0.05)
    done = {"status": "failure", "claimId": job["claimId"]}
    assert (await api.status(job["id"], done)).status_code == 202
    page = (await asyncio.wait_for(follow, 10)).json()
    assert (page["chunks"], page["ended"], page["outcome"], page["jobStatus"]) == (
        [],
        True,
        "completed",
        "failure",
    )


async def test_cap_keeps_head_marker_and_newest(database_url: str, anyio_backend: str) -> None:
    cap = 100_000
    async for api in make_api(database_url, log_max_bytes=cap):
        await _cap_holds(api, cap)


async def _cap_holds(api: Api, cap: int) -> None:
    job = await api.claimed_job()
    piece = 10_000
    count = 2 * cap // piece + 3
    for i in range(count):
        data = bytes([65 + i % 26]) * piece
        r = await _append(api, job, _chunk(data))
        assert r.status_code == 200, r.text
    assert r.json()["truncated"] is True
    assert r.json()["storedBytes"] <= cap
    page = (await _read(api, job["id"], limit=1000)).json()
    chunks = page["chunks"]
    streams = [c["stream"] for c in chunks]
    assert streams.count("marker") == 1
    marker = streams.index("marker")
    head, tail = chunks[:marker], chunks[marker + 1 :]
    assert [c["seq"] for c in head] == list(range(1, len(head) + 1))
    assert head and head[-1]["offset"] < cap // 2
    assert tail[-1]["seq"] == count  # the newest chunk is kept
    assert [c["seq"] for c in tail] == list(range(tail[0]["seq"], count + 1))
    text = base64.b64decode(chunks[marker]["data"]).decode()
    kept = sum(len(base64.b64decode(c["data"])) for c in head + tail)
    assert kept <= cap
    assert f"[jobagentctl: {piece * count - kept} bytes of output cut here" in text


async def test_retention_answers_gone(api: Api) -> None:
    from jobagentctl.server.http.metrics import Metrics
    from jobagentctl.server.reaper import Reaper

    metrics = Metrics()
    reaper = Reaper(
        api.store, interval=1, batch_size=10, max_reclaims=0, metrics=metrics, log_retention=0.001
    )
    job = await api.claimed_job()
    assert (await _append(api, job, _chunk(b"old\n"))).status_code == 200
    await reaper.run_once()
    assert (await _read(api, job["id"])).status_code == 200  # still running: kept
    done = {"status": "successful", "claimId": job["claimId"]}
    assert (await api.status(job["id"], done)).status_code == 202
    await asyncio.sleep(0.01)
    await reaper.run_once()
    assert metrics.registry.get_sample_value("jobagentctl_logs_expired_total") == 1
    r = await _read(api, job["id"])
    assert r.status_code == 410, r.text
    assert r.json()["code"] == "LOG_EXPIRED"


def test_log_settings_take_durations() -> None:
    import pydantic

    from jobagentctl.server.settings import ServerSettings

    base: dict[str, Any] = {"database": "sqlite:///unused.db"}
    assert ServerSettings(**base).log_retention == 30 * 86400
    assert ServerSettings(**base, log_retention="12h").log_retention == 12 * 3600
    assert ServerSettings(**base, log_retention="inf").log_retention == float("inf")
    assert ServerSettings(**base).log_max_bytes == 10 * 1024 * 1024
    with pytest.raises(pydantic.ValidationError):
        ServerSettings(**base, log_retention="soon")
