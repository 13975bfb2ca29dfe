"""Response bodies as bytes: jobs, pages, lists and the error shape, serialised once by pydantic.

Shared by the framework routes and the fast path so both answer byte-for-byte the same. The one
place such bytes become a framework ``Response`` is :func:`json_response`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from jobagentctl.models import AcceptedResponse, Job

__all__ = [
    "JSON",
    "RETRY_AFTER",
    "Result",
    "accepted_bytes",
    "claimed_jobs_bytes",
    "error_bytes",
    "job_bytes",
    "job_page_bytes",
    "json_response",
    "list_bytes",
    "model_bytes",
    "page_bytes",
]

JSON = "application/json"

# An answer as both HTTP paths send it: the status and the body's bytes.
Result = tuple[int, bytes]


# A 503 (the database unavailable for now: a lost connection, a timeout) says when to try
# again: soon; the agents back off on their own as well.
RETRY_AFTER = "1"


def json_response(result: Result) -> Response:
    """``result`` as the framework's ``Response`` (a 204 has no body and no content type)."""
    status, content = result
    if status == 204:
        return Response(status_code=204)
    headers = {"Retry-After": RETRY_AFTER} if status == 503 else None
    return Response(content=content, status_code=status, media_type=JSON, headers=headers)


def error_bytes(message: str, code: str, details: dict[str, Any] | None) -> bytes:
    """The API's error body, ``{"message", "code", "details"}``: every error answer's bytes."""
    return json.dumps({"message": message, "code": code, "details": details}).encode()


def model_bytes(model: BaseModel, *, exclude: set[str] | None = None) -> bytes:
    """``model`` as its wire JSON (camelCase names)."""
    return model.model_dump_json(by_alias=True, exclude=exclude).encode()


# Optional fields of ctrlplane's Job: omitted when absent, never sent as null, as ctrlplane's
# toJobResponse spreads them in only when set (a V1 client may test for the key, not the value).
_OPTIONAL_JOB_FIELDS = ("external_id", "message", "started_at", "completed_at", "updated_at")
# Ours, and only where the store read it (`jobs get`): absent otherwise, never null.
_OURS_OPTIONAL_JOB_FIELDS = ("claim_held",)


def _job_exclude(job: Job, include_dispatch_context: bool) -> set[str] | None:
    optional = _OPTIONAL_JOB_FIELDS + _OURS_OPTIONAL_JOB_FIELDS
    exclude = {name for name in optional if getattr(job, name) is None}
    if not include_dispatch_context or job.dispatch_context is None:
        exclude.add("dispatch_context")
    return exclude or None


def job_bytes(job: Job, include_dispatch_context: bool) -> bytes:
    """A job (or claimed job) as ctrlplane sends it: ``dispatchContext`` is absent (not null)
    unless asked for, and so are the optional fields it does not have."""
    return job.model_dump_json(
        by_alias=True, exclude=_job_exclude(job, include_dispatch_context)
    ).encode()


def page_bytes(items: Sequence[BaseModel], total: int, limit: int, offset: int) -> bytes:
    """A page ``{"items", "total", "limit", "offset"}`` of any wire models."""
    return _page(b",".join(model_bytes(item) for item in items), total, limit, offset)


def job_page_bytes(
    jobs: Sequence[Job],
    total: int,
    limit: int,
    offset: int,
    *,
    include_dispatch_context: bool,
    next_cursor: str | None = None,
) -> bytes:
    """A page of jobs, each as :func:`job_bytes` writes it, and ``nextCursor``: the cursor of
    the page after it, ``null`` on the last page."""
    body = b",".join(job_bytes(job, include_dispatch_context) for job in jobs)
    page = _page(body, total, limit, offset)
    return page[:-1] + b',"nextCursor":' + json.dumps(next_cursor).encode() + b"}"


def _page(body: bytes, total: int, limit: int, offset: int) -> bytes:
    tail = f'],"total":{total},"limit":{limit},"offset":{offset}}}'.encode()
    return b'{"items":[' + body + tail


def list_bytes(items: Sequence[BaseModel]) -> bytes:
    """A JSON array of wire models."""
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
