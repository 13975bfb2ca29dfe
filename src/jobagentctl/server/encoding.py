"""Response bodies as bytes: jobs, pages, lists and the error shape, serialised once by pydantic.

Shared by the FastAPI routes and the fast path so both answer byte-for-byte the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from jobagentctl.errors import JobAgentError
from jobagentctl.models import AcceptedResponse, Job

__all__ = [
    "accepted_bytes",
    "claimed_jobs_bytes",
    "error_bytes",
    "exception_bytes",
    "job_bytes",
    "job_page_bytes",
    "list_bytes",
    "model_bytes",
    "page_bytes",
]


def error_bytes(message: str, code: str, details: dict[str, Any] | None) -> bytes:
    return json.dumps({"message": message, "code": code, "details": details}).encode()


def exception_bytes(exc: JobAgentError) -> bytes:
    return error_bytes(exc.message, exc.code, exc.details)


def model_bytes(model: BaseModel, *, exclude: set[str] | None = None) -> bytes:
    return model.model_dump_json(by_alias=True, exclude=exclude).encode()


# Optional fields of ctrlplane's Job: omitted when absent, never sent as null (ctrlplane's
# toJobResponse spreads them in only when set; SPEC §3 "V1 parity").
_OPTIONAL_JOB_FIELDS = ("external_id", "message", "started_at", "completed_at", "updated_at")


def _job_exclude(job: Job, include_dispatch_context: bool) -> set[str] | None:
    exclude = {name for name in _OPTIONAL_JOB_FIELDS if getattr(job, name) is None}
    if not include_dispatch_context or job.dispatch_context is None:
        exclude.add("dispatch_context")
    return exclude or None


def job_bytes(job: Job, include_dispatch_context: bool) -> bytes:
    # dispatchContext is absent (not null) unless asked for: ctrlplane's behaviour.
    return job.model_dump_json(
        by_alias=True, exclude=_job_exclude(job, include_dispatch_context)
    ).encode()


def page_bytes(
    items: Sequence[BaseModel], total: int, limit: int, offset: int, *, exclude: Any = None
) -> bytes:
    body = b",".join(
        item.model_dump_json(by_alias=True, exclude=exclude).encode() for item in items
    )
    return _page(body, total, limit, offset)


def job_page_bytes(
    jobs: Sequence[Job], total: int, limit: int, offset: int, *, include_dispatch_context: bool
) -> bytes:
    body = b",".join(job_bytes(job, include_dispatch_context) for job in jobs)
    return _page(body, total, limit, offset)


def _page(body: bytes, total: int, limit: int, offset: int) -> bytes:
    tail = f'],"total":{total},"limit":{limit},"offset":{offset}}}'.encode()
    return b'{"items":[' + body + tail


def list_bytes(items: Sequence[BaseModel]) -> bytes:
    return b"[" + b",".join(model_bytes(item) for item in items) + b"]"


def _claimed(jobs: Sequence[Job]) -> bytes:
    return b"[" + b",".join(job_bytes(job, True) for job in jobs) + b"]"


def claimed_jobs_bytes(jobs: Sequence[Job]) -> bytes:
    """Claim-next's answer to a ``limit``: ``{"items": [claimed job…]}``."""
    return b'{"items":' + _claimed(jobs) + b"}"


def accepted_bytes(accepted: AcceptedResponse) -> bytes:
    """A 202 ``{id, message}``, and ``claimed`` only when the update asked for claimNext."""
    head = model_bytes(accepted, exclude={"claimed"})
    if accepted.claimed is None:
        return head
    return head[:-1] + b',"claimed":' + _claimed(accepted.claimed) + b"}"
