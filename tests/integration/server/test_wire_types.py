"""Strict wire types at the edge, on both databases and both request paths: times (RFC 3339
with an offset, representable in UTC), booleans and integers are refused with a 400 naming the
field when they are anything else; and a stored time that cannot be represented never turns a
read into a 500."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.fixtures.databases import sql
from tests.fixtures.server_app import Api

pytestmark = pytest.mark.anyio

AT = "2026-01-02T03:04:05.678Z"
# Valid RFC 3339 texts whose instant is outside years 1–9999 once in UTC.
OUT_OF_RANGE = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]
# Not a time of the wire: no offset, a date alone, epoch seconds (as text or a number), junk.
NOT_A_TIME: list[Any] = [
    "2026-01-02T03:04:05",
    "2026-01-02",
    "1700000000",
    1700000000,
    "soon",
    True,
]
# What lax parsing took as true (or false): only JSON true and false are booleans.
NOT_A_BOOLEAN: list[Any] = ["yes", "on", 1, "1", "true", 0, "false", "no"]


def _chunk(at: Any) -> dict[str, Any]:
    return {"stream": "stdout", "at": at, "data": base64.b64encode(b"line\n").decode()}


def _refused(r: Any, field: str) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "VALIDATION_ERROR", body
    assert [e["field"] for e in body["details"]["errors"]] == [field], body
    assert "Value error" not in r.text


async def test_times_outside_utc_or_not_rfc3339_are_refused_naming_the_field(
    api_each_path: Api,
) -> None:
    api = api_each_path
    job = await api.claimed_job()
    beat = {"claimId": job["claimId"]}
    logs = f"jobs/{job['id']}/logs"
    for bad in OUT_OF_RANGE + NOT_A_TIME:
        r = await api.heartbeat(job["id"], {**beat, "lastOutputAt": bad})
        _refused(r, "body.lastOutputAt")
        r = await api.call("POST", logs, {**beat, "chunks": [_chunk(AT), _chunk(bad)]})
        _refused(r, "body.chunks.1.at")
    assert (
        "range" in (await api.heartbeat(job["id"], {**beat, "lastOutputAt": OUT_OF_RANGE[0]})).text
    )
    # Nothing of them was stored; a good time still goes through, in any offset.
    assert (await api.call("GET", logs)).json()["chunks"] == []
    assert (await api.call("POST", logs, {**beat, "chunks": [_chunk(AT)]})).status_code == 200
    r = await api.heartbeat(job["id"], {**beat, "lastOutputAt": "2026-01-02T05:04:05+02:00"})
    assert r.status_code == 200, r.text
    (claim,) = await api.claims()
    assert claim["lastOutputAt"].startswith("2026-01-02T03:04:05")


async def test_booleans_and_integers_are_strict(api_each_path: Api) -> None:
    api = api_each_path
    agent = await api.agent()
    job = await api.enqueue(agent)
    for bad in NOT_A_BOOLEAN:
        r = await api.status(job["id"], {"status": "queued", "force": bad})
        _refused(r, "body.force")
    for bad in ["30", 30.5, True]:
        _refused(await api.claim_next(agent, {"leaseSeconds": bad}), "body.leaseSeconds")
        _refused(await api.claim_next(agent, {"limit": bad}), "body.limit")
    _refused(await api.claim_next(agent, {"waitSeconds": "1"}), "body.waitSeconds")
    # The control: the proper types are taken.
    assert (await api.status(job["id"], {"status": "queued", "force": True})).status_code == 202
    assert (await api.status(job["id"], {"status": "queued", "force": False})).status_code == 202
    r = await api.claim_next(agent, {"leaseSeconds": 30, "waitSeconds": 0, "limit": 1})
    assert r.status_code == 200, r.text


def _store_time(database_url: str, statement: str, iso: str, epoch: float) -> None:
    """``statement`` with ``{at}`` standing for a time as each dialect stores it: epoch seconds
    on SQLite, a timestamptz literal on PostgreSQL (no Python datetime can carry these)."""
    if database_url.startswith("sqlite:"):
        sql(database_url, statement.format(at="?"), [epoch])
    else:
        sql(database_url, statement.format(at=f"'{iso}'::timestamptz"))


async def test_a_stored_unrepresentable_time_does_not_break_reads(api: Api) -> None:
    """Written straight into the database (as an older server accepted it): the claims list,
    the urgent view and the log still answer 200, the value clamped to the earliest time."""
    job = await api.claimed_job()
    beat = {"claimId": job["claimId"]}
    logs = f"jobs/{job['id']}/logs"
    assert (await api.call("POST", logs, {**beat, "chunks": [_chunk(AT)]})).status_code == 200
    # 0001-01-01T00:00:00+14:00: year 0 in UTC.
    early = ("0001-01-01T00:00:00+14:00", -62135596800.0 - 14 * 3600)
    _store_time(api.database_url, "UPDATE job_claim SET last_output_at = {at}", *early)
    _store_time(api.database_url, "UPDATE job_log SET at = {at}", *early)

    r = await api.call("GET", "job-claims")
    assert r.status_code == 200, r.text
    assert r.json()["items"][0]["lastOutputAt"].startswith("0001-01-01T00:00:00")
    r = await api.call("GET", "job-claims/urgent", params={"quietAfter": "1"})
    assert r.status_code == 200, r.text
    assert r.json()["items"][0]["lastOutputAt"].startswith("0001-01-01T00:00:00")
    r = await api.call("GET", logs)
    assert r.status_code == 200, r.text
    assert r.json()["chunks"][0]["at"].startswith("0001-01-01T00:00:00")
    # The far end too: 9999-12-31T23:59:59-14:00 is past year 9999 in UTC.
    late = ("9999-12-31T23:59:59-14:00", 253402300799.0 + 14 * 3600)
    _store_time(api.database_url, "UPDATE job_log SET at = {at}", *late)
    _store_time(api.database_url, "UPDATE job_claim SET last_output_at = {at}", *late)
    r = await api.call("GET", logs)
    assert r.status_code == 200, r.text
    assert r.json()["chunks"][0]["at"].startswith("9999-12-31T23:59:59")
    r = await api.call("GET", "job-claims/urgent")
    assert r.status_code == 200, r.text
    assert r.json()["items"][0]["lastOutputAt"].startswith("9999-12-31T23:59:59")
