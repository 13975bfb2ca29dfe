"""Job listings paged by keyset cursor hold still while writers enqueue and claim, on SQLite
and PostgreSQL; the V1 offset parameters keep working."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.fixtures.server_app import Api

pytestmark = pytest.mark.anyio

Between = Callable[[list[str]], Awaitable[None]]


async def listing(api: Api, rest: str, params: dict[str, Any], between: Between) -> list[str]:
    """Every id of a listing, three a page, following nextCursor; ``between(seen)`` writes
    after each page."""
    seen: list[str] = []
    cursor = None
    while True:
        query = {**params, "limit": 3, **({"cursor": cursor} if cursor else {})}
        r = await api.call("GET", rest, params=query)
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [job["id"] for job in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            return seen
        await between(seen)


async def test_queued_listing_holds_still_under_claims_and_enqueues(api: Api) -> None:
    agent = await api.agent()
    initial = [(await api.enqueue(agent))["id"] for _ in range(12)]
    claimed: set[str] = set()

    async def writers(seen: list[str]) -> None:
        # Claim a job already listed (offsets would then skip one not yet listed), the oldest
        # queued job (not yet listed: it leaves the listing), and enqueue two newer ones.
        for job_id in (seen[0], None):
            r = await (
                api.claim(agent, job_id)
                if job_id and job_id not in claimed
                else api.claim_next(agent)
            )
            assert r.status_code == 200, r.text
            claimed.add(r.json()["id"])
        for _ in range(2):
            await api.enqueue(agent)

    seen = await listing(api, f"job-agents/{agent}/jobs", {"status": "queued"}, writers)
    assert [n for n in Counter(seen).values() if n > 1] == []  # nothing twice
    # Every job queued for the whole listing, exactly once, newest first.
    throughout = [job for job in reversed(initial) if job not in claimed]
    assert [job for job in seen if job in throughout] == throughout
    assert len(throughout) >= 4


async def test_workspace_listing_holds_still_under_enqueues(api: Api) -> None:
    agent = await api.agent()
    initial = [(await api.enqueue(agent))["id"] for _ in range(10)]

    async def writers(seen: list[str]) -> None:
        for _ in range(3):  # offsets would show the last page's jobs again
            await api.enqueue(agent)

    seen = await listing(api, "jobs", {}, writers)
    assert seen == list(reversed(initial))  # newer jobs came after the listing began


async def test_cursor_pages_total_offset_and_bad_cursors(api: Api) -> None:
    agent = await api.agent()
    jobs = [(await api.enqueue(agent))["id"] for _ in range(5)]
    newest_first = list(reversed(jobs))
    r = await api.call("GET", "jobs", params={"limit": 2})
    first = r.json()
    assert [j["id"] for j in first["items"]] == newest_first[:2]
    assert first["total"] == 5 and first["offset"] == 0 and first["nextCursor"]
    # V1's offset still pages (and gives a cursor too); a cursor with an offset skips on.
    r = await api.call("GET", "jobs", params={"limit": 2, "offset": 2})
    assert [j["id"] for j in r.json()["items"]] == newest_first[2:4]
    params = {"limit": 2, "offset": 1, "cursor": first["nextCursor"]}
    r = await api.call("GET", "jobs", params=params)
    assert [j["id"] for j in r.json()["items"]] == newest_first[3:5]
    assert r.json()["total"] == 5 and r.json()["nextCursor"] is None  # the last page
    # Past the end by cursor: empty, total still counts every match.
    r = await api.call(
        "GET", "jobs", params={"limit": 4, "offset": 9, "cursor": first["nextCursor"]}
    )
    assert r.json()["items"] == [] and r.json()["total"] == 5
    for bad in (
        "not-a-cursor",
        "WyJ4IiwyXQ==",
        "W10",
        "WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiw1XQ",
        "x" * 300,
    ):
        r = await api.call("GET", f"job-agents/{agent}/jobs", params={"cursor": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["code"] == "VALIDATION_ERROR"
