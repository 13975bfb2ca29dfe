"""Response bodies as bytes: jobs, pages, lists and the error shape, serialised once by pydantic.

Shared by the FastAPI routes and the fast path so both answer byte-for-byte the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from jobagentctl.errors import JobAgentError
from jobagentctl.models import Job

__all__ = [
    "NO_CONTEXT",
    "error_bytes",
    "exception_bytes",
    "job_bytes",
    "list_bytes",
    "model_bytes",
    "page_bytes",
]

NO_CONTEXT: Any = {"dispatch_context"}


def error_bytes(message: str, code: str, details: dict[str, Any] | None) -> bytes:
    return json.dumps({"message": message, "code": code, "details": details}).encode()


def exception_bytes(exc: JobAgentError) -> bytes:
    return error_bytes(exc.message, exc.code, exc.details)


def model_bytes(model: BaseModel) -> bytes:
    return model.model_dump_json(by_alias=True).encode()


def job_bytes(job: Job, include_dispatch_context: bool) -> bytes:
    # dispatchContext is absent (not null) unless asked for: ctrlplane's behaviour.
    exclude = None if include_dispatch_context else NO_CONTEXT
    return job.model_dump_json(by_alias=True, exclude=exclude).encode()


def page_bytes(
    items: Sequence[BaseModel], total: int, limit: int, offset: int, *, exclude: Any = None
) -> bytes:
    body = b",".join(
        item.model_dump_json(by_alias=True, exclude=exclude).encode() for item in items
    )
    tail = f'],"total":{total},"limit":{limit},"offset":{offset}}}'.encode()
    return b'{"items":[' + body + tail


def list_bytes(items: Sequence[BaseModel]) -> bytes:
    return b"[" + b",".join(model_bytes(item) for item in items) + b"]"
