"""Wire-shaped bodies for the unit tests: V2 objects and their ctrlplane-V1 counterparts."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

WORKSPACE = UUID("11111111-1111-4111-8111-111111111111")
AGENT = UUID("22222222-2222-4222-8222-222222222222")
JOB = UUID("33333333-3333-4333-8333-333333333333")
CLAIM = UUID("44444444-4444-4444-8444-444444444444")
API_KEY = "jak_testprefix.s3cr3t-value-never-printed"
BASE = "http://jobs.test"
WS = f"{BASE}/api/v1/workspaces/{WORKSPACE}"
T0 = "2024-05-01T12:00:00Z"


def job(**overrides: Any) -> dict[str, Any]:
    """A job exactly as ctrlplane V1 returns it: no lease fields at all."""
    body: dict[str, Any] = {
        "id": str(JOB),
        "releaseId": "",
        "jobAgentId": str(AGENT),
        "jobAgentConfig": {"script": "make"},
        "status": "queued",
        "createdAt": T0,
        "updatedAt": T0,
        "metadata": {},
    }
    body.update(overrides)
    return body


def claimed(**overrides: Any) -> dict[str, Any]:
    """A V2 claimed job."""
    body = job(
        status="inProgress",
        startedAt=T0,
        claimId=str(CLAIM),
        leaseSeconds=60,
        claimedAt=T0,
        claimExpiresAt="2024-05-01T12:01:00Z",
        attempt=1,
    )
    body.update(overrides)
    return body


def heartbeat(**overrides: Any) -> dict[str, Any]:
    body = {
        "jobId": str(JOB),
        "claimId": str(CLAIM),
        "attempt": 1,
        "leaseSeconds": 60,
        "claimExpiresAt": "2024-05-01T12:02:00Z",
    }
    body.update(overrides)
    return body


def accepted(message: str = "accepted") -> dict[str, Any]:
    return {"id": str(JOB), "message": message}


def page(items: list[Any], total: int | None = None, limit: int = 50, offset: int = 0) -> Any:
    return {
        "items": items,
        "total": len(items) if total is None else total,
        "limit": limit,
        "offset": offset,
    }


def agent(**overrides: Any) -> dict[str, Any]:
    body = {"id": str(AGENT), "name": "builder", "type": "shell", "config": {}, "metadata": {}}
    body.update(overrides)
    return body


def claim_row(state: str = "active", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "jobId": str(uuid4()),
        "jobAgentId": str(AGENT),
        "claimId": str(uuid4()),
        "attempt": 1,
        "claimedAt": T0,
        "claimExpiresAt": "2024-05-01T12:01:00Z",
        "leaseSeconds": 60,
        "lastHeartbeatAt": T0,
        "state": state,
    }
    if state == "unleased":
        body.update(
            claimId=None, claimExpiresAt=None, leaseSeconds=None, lastHeartbeatAt=None, attempt=None
        )
    body.update(overrides)
    return body


def attempt(n: int = 1, outcome: str | None = "expired") -> dict[str, Any]:
    return {
        "attempt": n,
        "claimId": str(uuid4()),
        "jobAgentId": str(AGENT),
        "claimedAt": T0,
        "endedAt": T0 if outcome else None,
        "outcome": outcome,
    }


def error(code: str, message: str = "nope", details: dict[str, Any] | None = None) -> Any:
    return {"message": message, "code": code, "details": details}
