"""The encoding A/B: the hot cycle's pydantic steps against msgspec, per claim+complete cycle.

Usage: python -m benchmarks.encoding_ab                       (timeit, min of 7 repeats)
       valgrind --tool=callgrind python -m benchmarks.encoding_ab --only PATH N
       (instructions: subtract the run with PATH ``none``; PATH is pydantic, msgspec or
       msgspec-encode)            (needs ``pip install msgspec``: measured, not a dependency)

One cycle is what the fast path does for claim-next + a status update: decode the two bodies,
encode the claimed job and the 202. ``pydantic`` is the server's code (``encoding.py``,
``model_validate_json``); ``msgspec`` decodes with msgspec Structs and hands the service the
models it takes (``model_construct``), and encodes with Structs whose bytes equal pydantic's
(the documents users write are still written by pydantic's serialiser: msgspec spells some
floats differently, ``1e16`` for ``1e+16``); ``msgspec-encode`` keeps pydantic's decode.
This was the trial; it was not kept (docs/benchmarks.md, "The hot path A/B").
"""

from __future__ import annotations

import argparse
import timeit
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec
from pydantic import BaseModel
from pydantic_core import to_json

from jobagentctl.models import (
    MAX_CLAIM_BATCH,
    AcceptedResponse,
    ClaimedJob,
    ClaimNext,
    ClaimNextRequest,
    ClaimRequest,
    HeartbeatRequest,
    JobStatus,
    UpdateJobStatusRequest,
)
from jobagentctl.server import encoding

_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Batch = Annotated[int, msgspec.Meta(ge=1, le=MAX_CLAIM_BATCH)]
_UNSET: Any = msgspec.UNSET


class _Body(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    pass


class _Claim(_Body):
    lease_seconds: _NonNegative | None = None


class _ClaimNextBody(_Body):
    lease_seconds: _NonNegative | None = None
    wait_seconds: Annotated[float, msgspec.Meta(ge=0)] | None = None
    limit: _Batch | None = None


class _ClaimNextInUpdate(_Body):
    lease_seconds: _NonNegative | None = None
    limit: _Batch = 1


class _Heartbeat(_Body):
    claim_id: UUID | None = None
    lease_seconds: _NonNegative | None = None


class _Update(_Body):
    status: JobStatus
    claim_id: UUID | None = None
    message: Annotated[str, msgspec.Meta(max_length=65536)] | None = None
    external_id: Annotated[str, msgspec.Meta(max_length=1024)] | None = None
    metadata: dict[str, Any] | None = None
    claim_next: _ClaimNextInUpdate | None = None


def _fields(struct: msgspec.Struct) -> dict[str, Any]:
    return {name: getattr(struct, name) for name in struct.__struct_fields__}


def _update(body: _Update) -> UpdateJobStatusRequest:
    fields = _fields(body)
    if body.claim_next is not None:
        fields["claim_next"] = ClaimNext.model_construct(**_fields(body.claim_next))
    return UpdateJobStatusRequest.model_construct(**fields)


_DECODERS: dict[type[BaseModel], tuple[msgspec.json.Decoder[Any], Any]] = {
    ClaimRequest: (
        msgspec.json.Decoder(_Claim),
        lambda b: ClaimRequest.model_construct(**_fields(b)),
    ),
    ClaimNextRequest: (
        msgspec.json.Decoder(_ClaimNextBody),
        lambda b: ClaimNextRequest.model_construct(**_fields(b)),
    ),
    HeartbeatRequest: (
        msgspec.json.Decoder(_Heartbeat),
        lambda b: HeartbeatRequest.model_construct(**_fields(b)),
    ),
    UpdateJobStatusRequest: (msgspec.json.Decoder(_Update), _update),
}


def decode(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """``body`` as ``model``, or None when this decoder refuses it (the model then decides)."""
    decoder, build = _DECODERS[model]
    try:
        return build(decoder.decode(body))  # type: ignore[no-any-return]
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class _ClaimedJob(msgspec.Struct, rename="camel", omit_defaults=True):
    # The order of the pydantic model's fields; UNSET = absent (optional fields it leaves out).
    id: UUID
    release_id: str
    job_agent_id: UUID | str
    job_agent_config: msgspec.Raw
    status: JobStatus
    created_at: datetime
    updated_at: datetime | msgspec.UnsetType
    metadata: msgspec.Raw
    external_id: str | msgspec.UnsetType
    message: str | msgspec.UnsetType
    started_at: datetime | msgspec.UnsetType
    completed_at: datetime | msgspec.UnsetType
    dispatch_context: msgspec.Raw | msgspec.UnsetType
    claim_id: UUID | None
    lease_seconds: int | None
    claimed_at: datetime | None
    claim_expires_at: datetime | None
    attempt: int | None


class _Accepted(msgspec.Struct):
    id: UUID | str
    message: str


_encode = msgspec.json.Encoder().encode


def _or_unset(value: Any) -> Any:
    return _UNSET if value is None else value


_EMPTY = msgspec.Raw(b"{}")


def _free_json(value: dict[str, Any] | None) -> Any:
    # Documents the user wrote (config, metadata, dispatch context) are written by pydantic's
    # serialiser, as before: msgspec spells some floats differently (1e16, not 1e+16).
    if value is None:
        return _UNSET
    return msgspec.Raw(to_json(value)) if value else _EMPTY


def claimed_job_bytes(job: ClaimedJob) -> bytes:
    """A claimed job as ``encoding.job_bytes(job, True)`` writes it."""
    return _encode(
        _ClaimedJob(
            job.id,
            job.release_id,
            job.job_agent_id,
            _free_json(job.job_agent_config),
            job.status,
            job.created_at,
            _or_unset(job.updated_at),
            _free_json(job.metadata),
            _or_unset(job.external_id),
            _or_unset(job.message),
            _or_unset(job.started_at),
            _or_unset(job.completed_at),
            _free_json(job.dispatch_context),
            job.claim_id,
            job.lease_seconds,
            job.claimed_at,
            job.claim_expires_at,
            job.attempt,
        )
    )


def accepted_bytes(accepted: AcceptedResponse) -> bytes:
    """A 202 ``{id, message}`` with ``claimed`` only when the update asked for claimNext."""
    head = _encode(_Accepted(accepted.id, accepted.message))
    if accepted.claimed is None:
        return head
    jobs = b",".join(claimed_job_bytes(job) for job in accepted.claimed)
    return head[:-1] + b',"claimed":[' + jobs + b"]}"


def claimed_jobs_bytes(jobs: list[ClaimedJob]) -> bytes:
    """Claim-next's answer to a ``limit``: ``{"items": [claimed job…]}``."""
    return b'{"items":[' + b",".join(claimed_job_bytes(job) for job in jobs) + b"]}"


NOW = datetime.now(UTC)
CLAIM = uuid.uuid4()
JOB = ClaimedJob(
    id=uuid.uuid4(),
    job_agent_id=uuid.uuid4(),
    status=JobStatus.IN_PROGRESS,
    created_at=NOW,
    updated_at=NOW,
    started_at=NOW,
    claim_id=CLAIM,
    lease_seconds=60,
    claimed_at=NOW,
    claim_expires_at=NOW,
    attempt=1,
)
ACCEPTED = AcceptedResponse(id=JOB.id, message="Job status updated")
CLAIM_BODY = b'{"leaseSeconds":60,"waitSeconds":0}'
UPDATE_BODY = f'{{"status":"successful","claimId":"{CLAIM}"}}'.encode()


def pydantic_cycle() -> None:
    ClaimNextRequest.model_validate_json(CLAIM_BODY)
    encoding.job_bytes(JOB, True)
    UpdateJobStatusRequest.model_validate_json(UPDATE_BODY)
    encoding.accepted_bytes(ACCEPTED)


def msgspec_cycle() -> None:
    decode(ClaimNextRequest, CLAIM_BODY)
    claimed_job_bytes(JOB)
    decode(UpdateJobStatusRequest, UPDATE_BODY)
    accepted_bytes(ACCEPTED)


def msgspec_encode_cycle() -> None:
    ClaimNextRequest.model_validate_json(CLAIM_BODY)
    claimed_job_bytes(JOB)
    UpdateJobStatusRequest.model_validate_json(UPDATE_BODY)
    accepted_bytes(ACCEPTED)


PATHS: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "pydantic": pydantic_cycle,
    "msgspec": msgspec_cycle,
    "msgspec-encode": msgspec_encode_cycle,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs=2, metavar=("PATH", "N"))
    args = parser.parse_args()
    assert claimed_job_bytes(JOB) == encoding.job_bytes(JOB, True)
    assert accepted_bytes(ACCEPTED) == encoding.accepted_bytes(ACCEPTED)
    if args.only:
        run = PATHS[args.only[0]]
        for _ in range(int(args.only[1])):
            run()
        return
    for name, run in PATHS.items():
        if name != "none":
            seconds = min(timeit.repeat(run, number=20_000, repeat=7)) / 20_000
            print(f"{name}: {seconds * 1e6:.2f} µs per cycle")


if __name__ == "__main__":
    main()
