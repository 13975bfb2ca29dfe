"""The wire models and the names both sides share: the enums, the lease's cadence. The package
:mod:`jobagentctl.models` re-exports them with the other models and the environment names."""

from __future__ import annotations

import weakref
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Generic, Literal, Self, TypeVar
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

__all__ = [
    "CLAIM_ROW_STATES",
    "DELIVERING_MARK",
    "DELIVERY_PENDING",
    "HEARTBEAT_INTERVAL_MAX",
    "HEARTBEAT_INTERVAL_MIN",
    "QUIET_MARK",
    "SLUG_PATTERN",
    "STALE_MARK",
    "TERMINAL_STATUSES",
    "AcceptedResponse",
    "AgentState",
    "AttemptOutcome",
    "ClaimState",
    "ClaimedJob",
    "ClaimedJobs",
    "ErrorBody",
    "Heartbeat",
    "Job",
    "JobAgent",
    "JobAttempt",
    "JobClaim",
    "JobStatus",
    "JobWait",
    "Page",
    "UrgentClaims",
    "WireModel",
    "WireTime",
    "Workspace",
    "heartbeat_interval",
    "keep_wire",
    "timestamps_as_sent",
]


class JobStatus(StrEnum):
    """ctrlplane's job status enum, as on the wire."""

    PENDING = "pending"
    QUEUED = "queued"
    IN_PROGRESS = "inProgress"
    ACTION_REQUIRED = "actionRequired"
    SUCCESSFUL = "successful"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    INVALID_JOB_AGENT = "invalidJobAgent"
    INVALID_INTEGRATION = "invalidIntegration"
    EXTERNAL_RUN_NOT_FOUND = "externalRunNotFound"


TERMINAL_STATUSES: frozenset[JobStatus] = frozenset(
    {
        JobStatus.SUCCESSFUL,
        JobStatus.FAILURE,
        JobStatus.CANCELLED,
        JobStatus.SKIPPED,
        JobStatus.INVALID_JOB_AGENT,
        JobStatus.INVALID_INTEGRATION,
        JobStatus.EXTERNAL_RUN_NOT_FOUND,
    }
)


class ClaimState(StrEnum):
    """The state of a claim, as ``GET /job-claims`` reports it and ``--state`` filters it.

    A claim row is ``ACTIVE`` (lease holds), ``EXPIRED`` (lease ran out, not yet reaped) or
    ``UNLEASED`` (claimed without a lease: a V1 claim); ``REVOKED`` is a claim an operator ended
    (requeue, cancel) that its agent has not let go of yet. The job is not claimable until the agent
    reports its command gone or the lease runs out. ``ALL`` is only a filter value ("every
    state"); no row is ever in it. :data:`CLAIM_ROW_STATES` is the set a row can be in.
    """

    ACTIVE = "active"
    EXPIRED = "expired"
    UNLEASED = "unleased"
    REVOKED = "revoked"
    ALL = "all"


CLAIM_ROW_STATES: frozenset[ClaimState] = frozenset(
    {ClaimState.ACTIVE, ClaimState.EXPIRED, ClaimState.UNLEASED, ClaimState.REVOKED}
)


class AgentState(StrEnum):
    """An agent's presence, as ``agents list`` shows and ``--state`` filters it:

    - ``OFFLINE``: not seen within the server's presence window, or never. Whatever it holds: a dead
      agent is not busy.
    - ``BUSY``: seen, and a job of its is in progress, or a claim of its was revoked and not let go
      yet.
    - ``IDLE``: seen, holding nothing.
    """

    BUSY = "busy"
    IDLE = "idle"
    OFFLINE = "offline"


class AttemptOutcome(StrEnum):
    """How one attempt (one claim) of a job ended, as ``GET /jobs/{id}/attempts`` reports it."""

    COMPLETED = "completed"  # reported a terminal status other than cancelled
    EXPIRED = "expired"  # the lease ran out and the reaper ended the attempt
    RELEASED = "released"  # given back to the queue (status queued) by the holder or an operator
    CANCELLED = "cancelled"  # the job was cancelled while this attempt held it


# --- the lease's cadence and the workspace slug, as both sides of the wire count them ------

# Time between heartbeats: a third of the lease, within these bounds (seconds). `run` beats at
# this cadence; the reaper spares a lease for one such interval after a database outage.
HEARTBEAT_INTERVAL_MIN = 1.0
HEARTBEAT_INTERVAL_MAX = 60.0


def heartbeat_interval(lease_seconds: float) -> float:
    """Time between heartbeats for a lease of ``lease_seconds``: a third of it, within
    [``HEARTBEAT_INTERVAL_MIN``, ``HEARTBEAT_INTERVAL_MAX``]."""
    return min(HEARTBEAT_INTERVAL_MAX, max(HEARTBEAT_INTERVAL_MIN, lease_seconds / 3))


# ctrlplane's Workspace.slug (apps/api/openapi/openapi.json at 66e0888): lowercase letters,
# digits and '-', 3 to 50 of them. The server makes only such slugs and the client accepts
# exactly these, so every slug the server prints works as --workspace.
SLUG_PATTERN = r"[a-z0-9-]{3,50}"


class WireModel(BaseModel):
    """Base for responses: camelCase on the wire, unknown fields kept as they came.

    A model the client parsed (:meth:`from_wire`) also has the JSON object it came from.
    So ``-o json`` prints what the server sent, value for value, in the server's order
    (:meth:`as_sent`).
    For example ``"…33.000Z"`` stays so; a re-rendered datetime would not.
    That JSON is kept beside the model, not in it: a wire model holds its fields only.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=False
    )

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """``data`` (a decoded JSON response) validated.

        The model and every model in it keep their part of ``data``.
        """
        return keep_wire(cls.model_validate(data), data)

    def as_sent(self) -> dict[str, Any] | None:
        """The JSON object this model was parsed from (a shallow copy).

        None when it was not parsed from a response (built by the server, or by the client).
        """
        sent = _SENT.get(id(self))
        return None if sent is None else dict(sent)


WireT = TypeVar("WireT")

# The JSON object each parsed model came from, by the model's id(). An entry leaves when its
# model is collected (a weakref finalizer), before that id can name another object.
_SENT: dict[int, dict[str, Any]] = {}


def keep_wire(value: WireT, data: Any) -> WireT:
    """Give each :class:`WireModel` in ``value`` its part of ``data``; return ``value``.

    ``value`` is a model, or a list of them, as validated from ``data``.
    """
    if isinstance(value, WireModel) and isinstance(data, dict):
        key = id(value)
        if key not in _SENT:
            weakref.finalize(value, _SENT.pop, key, None)
        _SENT[key] = data
        for name, field in type(value).model_fields.items():
            keep_wire(getattr(value, name), data.get(field.alias or name))
    elif isinstance(value, list) and isinstance(data, list) and len(value) == len(data):
        for item, sent in zip(value, data, strict=True):
            keep_wire(item, sent)
    return value


_TIME_FORMAT = "must be an RFC 3339 date-time string with an offset, e.g. 2026-01-02T03:04:05Z"


def _wire_time(value: Any, parse: ValidatorFunctionWrapHandler) -> datetime:
    """A date and time as text (``YYYY-MM-DDThh:mm…``; pydantic parses it), with an offset,
    representable in UTC; normalised to UTC. One call per value: this runs for each of up to
    1,000 chunks of a log append."""
    # A datetime passes: the client builds requests from its own values. Text must hold a date
    # and a time (digits alone would be read as epoch seconds, a date alone as midnight).
    if not isinstance(value, datetime) and not (
        isinstance(value, str) and len(value) >= 20 and value[10] in "Tt "
    ):
        raise PydanticCustomError("time_format", _TIME_FORMAT)
    parsed: datetime = parse(value)
    if parsed.tzinfo is None:  # a local time of somewhere unknown
        raise PydanticCustomError("time_format", _TIME_FORMAT)
    # 0001-01-01T00:00:00+14:00 is a valid text but year 0 in UTC: stored, it could not be read.
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise PydanticCustomError(
            "time_range", "is out of range once converted to UTC (years 1 to 9999)"
        ) from None


# A time in a request body (a log chunk's ``at``, a heartbeat's ``lastOutputAt``): a date-time
# string with an offset (RFC 3339), representable in UTC; held normalised to UTC. Every request
# model takes its times as this type, so each endpoint refuses the same inputs with a 400.
WireTime = Annotated[datetime, WrapValidator(_wire_time)]


class RequestModel(BaseModel):
    """Base for request bodies: camelCase, unknown fields ignored (as ctrlplane does)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ErrorBody(WireModel):
    """Our error body. ctrlplane's validator sends ``details`` as a list: any JSON is kept."""

    message: str
    code: str
    details: Any = None


T = TypeVar("T")


class Page(WireModel, Generic[T]):
    """A page of a paginated list: ``items``, and where it sits in the whole list.

    ``next_cursor`` (job listings of our server): the ``cursor`` of the page after this one, None on
    the last page. A server that pages only by offset (ctrlplane) does not send it.
    """

    items: list[T]
    total: int
    limit: int
    offset: int
    next_cursor: str | None = None


class Workspace(WireModel):
    """ctrlplane's ``Workspace``, as ``GET /v1/workspaces/slug/{slug}`` answers it. Only ``id`` is
    required: a client needs no more to resolve a slug. ``name``, ``slug`` and ``createdAt`` are
    what our server sends of ctrlplane's wider object."""

    id: UUID
    name: str | None = None
    slug: str | None = None
    created_at: datetime | None = None

    @staticmethod
    def reference(value: UUID | str | None) -> UUID | str | None:
        """What a person means by ``value``: a workspace id (a UUID, also as text), else a slug
        (any other text, stripped); ``None`` for nothing or blank text."""
        if value is None or isinstance(value, UUID):
            return value
        text = value.strip()
        if not text:
            return None
        try:
            return UUID(text)
        except ValueError:
            return text


class JobAgent(WireModel):
    """ctrlplane's ``JobAgent``: a registered agent, the jobs of which it pulls."""

    id: UUID
    workspace_id: UUID | None = None
    name: str
    type: str
    config: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Ours (absent from ctrlplane): presence, judged by the server when it answers.
    state: AgentState | None = None
    last_seen_at: datetime | None = None
    # Ours: its jobs in progress plus its revoked claims not let go yet, whatever its state
    # (an offline agent holding leases until they expire shows them here).
    held_claims: int | None = None


class Job(WireModel):
    """A job. ``job_agent_id`` is ``""`` when the job has no agent (never assigned, or its agent
    was deleted), as ctrlplane sends it; :attr:`agent_id` gives ``None`` for that."""

    id: UUID
    release_id: str = ""
    job_agent_id: UUID | Literal[""] = ""
    job_agent_config: dict[str, Any] = Field(default_factory=dict)
    status: JobStatus
    created_at: datetime
    updated_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    external_id: str | None = None
    message: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    dispatch_context: dict[str, Any] | None = None
    # Ours, on `jobs get` only, and only when true (absent otherwise, and from ctrlplane): an
    # agent still holds a claim on the job — its running attempt's, or one an operator revoked
    # (requeue, cancel) whose command has not ended yet, during which a queued job waits.
    claim_held: bool | None = None

    @field_validator("job_agent_id", mode="before")
    @classmethod
    def _no_agent(cls, value: Any) -> Any:
        return "" if value is None else value

    @property
    def agent_id(self) -> UUID | None:
        """The job's agent, or ``None`` when it has none."""
        return self.job_agent_id or None


class ClaimedJob(Job):
    """A job as returned by a claim. ``claim_id``/``lease_seconds`` are None when unleased."""

    claim_id: UUID | None = None
    lease_seconds: int | None = None
    claimed_at: datetime | None = None
    claim_expires_at: datetime | None = None
    attempt: int | None = None


class Heartbeat(WireModel):
    """The answer of a heartbeat: the claim it renewed and its new expiry, by the database clock."""

    job_id: UUID
    claim_id: UUID
    attempt: int
    lease_seconds: int
    claim_expires_at: datetime


class JobWait(WireModel):
    """The answer of ``POST …/jobs/{jobId}/wait``: ``claim_held`` is False once the claim
    ended (completed, cancelled, released, reaped), True when the wait ran out."""

    job_id: UUID
    status: JobStatus
    claim_held: bool


class JobClaim(WireModel):
    """One row of ``GET …/job-claims``: a claim's lease as the server sees it."""

    job_id: UUID
    job_agent_id: UUID
    claim_id: UUID | None = None
    attempt: int | None = None
    claimed_at: datetime | None = None
    claim_expires_at: datetime | None = None
    lease_seconds: int | None = None
    last_heartbeat_at: datetime | None = None
    state: ClaimState
    # The last output the agent reported (heartbeat), if any; None from older servers too.
    last_output_at: datetime | None = None
    # A gateway's claim whose report waits for ctrlplane: DELIVERY_PENDING (held, never
    # reaped, until delivered); absent otherwise and from our own server.
    delivery: str | None = None


# JobClaim.delivery of a report accepted by a gateway and not yet taken by ctrlplane.
DELIVERY_PENDING = "pending"


class JobAttempt(WireModel):
    """One claim of a job (``GET …/jobs/{jobId}/attempts``): who held it, when, how it ended."""

    attempt: int
    claim_id: UUID | None = None
    job_agent_id: UUID
    claimed_at: datetime
    ended_at: datetime | None = None
    outcome: AttemptOutcome | None = None


class AcceptedResponse(WireModel):
    """A 202 ``{id, message}``. ctrlplane echoes the path parameter as it came. So ``id`` is
    whatever string the server sends (a UUID from us and from our server)."""

    id: UUID | str
    message: str = ""
    # Only when the update asked for claimNext (absent otherwise, and from servers without it).
    claimed: list[ClaimedJob] | None = None


class ClaimedJobs(WireModel):
    """Claim-next's answer to a ``limit``: the claimed jobs, oldest first."""

    items: list[ClaimedJob]


def timestamps_as_sent(model: WireModel) -> dict[str, str]:
    """The model's timestamps as the server wrote them (``"…00.389Z"``), by wire name: each
    datetime field whose sent text still means the value the model holds. Empty for a model
    not parsed from a response. What we print or hand over, we pass through unreworded."""
    sent = model.as_sent() or {}
    kept: dict[str, str] = {}
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        value, text = getattr(model, name, None), sent.get(key)
        if isinstance(value, datetime) and isinstance(text, str) and _means(text, value):
            kept[key] = text
    return kept


def _means(text: str, value: datetime) -> bool:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")) == value
    except ValueError:
        return False


# The mark of an active claim silent for longer than a caller's threshold (``staleAfter``,
# ``--stale-after``): not a claim state of the server, a judgement of the caller's.
STALE_MARK = "stale"
# The mark of an active claim whose command printed nothing for longer than a caller's threshold
# (``quietAfter``, ``--quiet-after``): a judgement of the caller's, as ``stale``.
QUIET_MARK = "quiet"
# The mark of a gateway's claim whose holder reported and whose report waits for ctrlplane
# (``delivery: pending``): held, never reaped, its heartbeats no longer expected.
DELIVERING_MARK = "delivering"


class UrgentClaims(WireModel):
    """``GET …/job-claims/urgent``: what a live view of thousands of claims needs, in one request.

    - ``items``: at most ``limit`` claims, most urgent first (expired; unleased or stale; then
      nearest expiry).
    - ``counts``: how many claims there are of each mark (a claim state, or ``stale``). Marks with
      no claim are left out.
    - ``total``: how many claims in all.
    """

    items: list[JobClaim]
    counts: dict[str, int]
    total: int
    limit: int
