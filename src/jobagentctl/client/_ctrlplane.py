"""Compatibility with servers that speak only the V1 pull-agent API, kept out of the client's
endpoint methods. These are ctrlplane (whose own API has no leases) and older jobagentctl servers.

What a server turned out to lack is learned once per process (:data:`MEMORY`) and said once on
stderr. The endpoint methods of :class:`~jobagentctl.client.Client` stay one request and one parse
each. They hand the few operations that differ on such a server to :class:`V1Fallback`:

- claim-next (a job or a batch): the oldest of the agent's queued jobs is claimed by id (the next on
a lost race). They are polled with jitter until the wait runs out (no claim id, no lease);
- ``GET /jobs?status=``: ctrlplane refuses the parameter, so the jobs are filtered here;
- a status update's message, external id and metadata: ctrlplane stores only the status;
- the claim long-poll: missing on such a server, so a cancel waits for the next heartbeat;
- a claim by id answered 409 without our error code: the job was not claimable;
- job logs: missing on such a server (:class:`LogsUnsupported`, learned once).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from jobagentctl.client._pages import iter_pages
from jobagentctl.errors import (
    Conflict,
    LeaseUnsupported,
    LogExpired,
    LogNotFound,
    LogsUnsupported,
    NoJob,
    NotClaimable,
    NotFound,
    ValidationError,
)
from jobagentctl.models import ClaimedJob, ClaimNext, Job, JobStatus, Page
from jobagentctl.routes import Routes

__all__ = [
    "MEMORY",
    "V1_POLL_INTERVAL",
    "ProcessMemory",
    "ServerFacts",
    "V1Calls",
    "V1Fallback",
    "V1Pacing",
]

# How often a V1 claim looks for queued jobs. Each pause is V1_POLL_INTERVAL ± 50 % (jitter), so
# many agents do not poll in step.
V1_POLL_INTERVAL = 2.0
# Page size of the lists read to claim V1-style or to filter jobs by status.
V1_PAGE = 200

_NO_LEASES = (
    "the server has no lease support ({why}): claiming with the V1 API instead (list the "
    "agent's queued jobs, claim one by id). Claims carry no claim id and no lease: heartbeats "
    "are unavailable, and a crash leaves the job inProgress until someone requeues it"
)
_NO_LEASE_BY_ID = (
    "the server has no lease support ({why}): the job was claimed by id without a claim id or "
    "a lease. Heartbeats are unavailable, and a crash leaves the job inProgress until someone "
    "requeues it"
)
# What ctrlplane's job handlers answer (404) for a job they cannot find.
_CTRLPLANE_NO_JOB = "Job not found"
# No parentheses of its own: `run` quotes it inside its own notice's parentheses.
_NO_LOGS = "the server has no log support, {why}: job output is not stored there"
_NO_WAIT = (
    "the server has no claim long-poll ({why}): a cancel reaches the command at its next heartbeat"
)


@dataclass
class ServerFacts:
    """What this process learned about one server (by base URL).

    ``v1_only``: True once claim-next answered "no such route", False once a V2 route answered,
    None until then. ``slugs``: workspace slugs resolved to ids. ``no_status_filter``:
    ``GET /jobs`` refused the ``status`` parameter. ``no_wait``: there is no claim long-poll.
    ``no_logs``: there is no log endpoint.
    ``warned``: the topics of the one-time warnings already given.
    """

    v1_only: bool | None = None
    slugs: dict[str, UUID] = field(default_factory=dict)
    no_status_filter: bool = False
    no_wait: bool = False
    no_logs: bool = False
    warned: set[str] = field(default_factory=set)


class ProcessMemory:
    """What this process learned about servers, shared by every client in it (threads too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: dict[str, ServerFacts] = {}

    def of(self, url: str) -> ServerFacts:
        """The facts about the server at ``url`` (a new, empty record the first time)."""
        with self._lock:
            return self._servers.setdefault(url, ServerFacts())

    def first_time(self, url: str, topic: str) -> bool:
        """True once per server and topic: whether a one-time warning is still to be given."""
        with self._lock:
            warned = self._servers.setdefault(url, ServerFacts()).warned
            if topic in warned:
                return False
            warned.add(topic)
            return True

    def forget(self) -> None:
        """Start over as a new process would (tests, and in-process CLI runs, share one)."""
        with self._lock:
            self._servers.clear()


MEMORY = ProcessMemory()


class V1Calls(Protocol):
    """The server calls :class:`V1Fallback` makes: the client's, named here so this module
    needs no import of the client."""

    url: str

    def claim_next_request(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float | None,
        limit: int | None,
    ) -> list[ClaimedJob]: ...

    def list_agent_jobs(
        self,
        agent_id: UUID,
        *,
        status: JobStatus | str | None = ...,
        include_dispatch_context: bool = ...,
        limit: int = ...,
        offset: int = ...,
        cursor: str | None = ...,
    ) -> Page[Job]: ...

    def claim_job(
        self, agent_id: UUID, job_id: UUID, *, lease_seconds: int | None
    ) -> ClaimedJob: ...

    def jobs_page(
        self,
        *,
        status: str | None = ...,
        limit: int = ...,
        offset: int = ...,
        cursor: str | None = ...,
    ) -> Page[Job]: ...

    def get_job(self, job_id: UUID) -> Job: ...


@dataclass(frozen=True)
class V1Pacing:
    """How a claim on a V1-only server polls: every ``poll_interval`` seconds (± 50 %). It is timed
    by ``clock`` and waited out with ``sleep`` (tests give their own)."""

    poll_interval: float = V1_POLL_INTERVAL
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass
class V1Fallback:
    """The operations of one :class:`Client` that differ on a V1-only server.

    Each tries the V2 way first unless the server is known to lack it, and learns from the answer.
    Otherwise it does what ctrlplane's own agents do. ``warn`` hears each lack once per process;
    ``pacing`` paces a V1 claim's polling.
    """

    client: V1Calls
    warn: Callable[[str], None]
    pacing: V1Pacing
    # status → every job of that status, read once by this client when the server cannot
    # filter: the later pages of one listing come from here, not from a new full read.
    _filtered: dict[str, list[Job]] = field(default_factory=dict)

    @property
    def _facts(self) -> ServerFacts:
        return MEMORY.of(self.client.url)

    def warn_once(self, topic: str, message: str) -> None:
        """Say ``message`` unless this process already said ``topic`` about this server."""
        if MEMORY.first_time(self.client.url, topic):
            self.warn(message)

    def learned(self, *, v1_only: bool) -> None:
        """Remember what a V2 route's answer (or its absence) showed about the server."""
        self._facts.v1_only = v1_only

    # --- claiming -----------------------------------------------------------------------------

    def claim(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float | None,
        limit: int | None,
    ) -> list[ClaimedJob]:
        """Claim-next; on a server without it (it answers 404/405), the agent's oldest queued
        jobs claimed by id, as ctrlplane's RFC 0014 asks of V1 agents. Such claims have no
        claim id and no lease. :class:`NoJob` when none came within ``wait_seconds``."""
        if self._facts.v1_only:
            return self._claim_by_id(agent_id, wait_seconds, limit or 1)
        try:
            claimed = self.client.claim_next_request(
                agent_id, lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=limit
            )
        except LeaseUnsupported as exc:
            self.learned(v1_only=True)
            why = f"{Routes.brief('POST', Routes.CLAIM_NEXT)} answered {exc.status}"
            self.warn_once("no-leases", _NO_LEASES.format(why=why))
            return self._claim_by_id(agent_id, wait_seconds, limit or 1)
        except NoJob:
            self.learned(v1_only=False)
            raise
        self.learned(v1_only=False)
        return claimed

    def _claim_by_id(
        self, agent_id: UUID, wait_seconds: float | None, limit: int
    ) -> list[ClaimedJob]:
        deadline = self.pacing.clock() + (wait_seconds or 0.0)
        while True:
            claimed = self._claim_queued(agent_id, limit)
            if claimed:
                return claimed
            left = deadline - self.pacing.clock()
            if left <= 0:
                raise NoJob("no job queued for this agent")
            self.pacing.sleep(min(left, self.pacing.poll_interval * random.uniform(0.5, 1.5)))

    def _claim_queued(self, agent_id: UUID, limit: int) -> list[ClaimedJob]:
        """Up to ``limit`` of the agent's queued jobs, claimed oldest first (ctrlplane lists them
        newest first). A job another agent took meanwhile (409), or that went away, is passed
        over."""
        client = self.client
        queued = iter_pages(
            lambda n, off: client.list_agent_jobs(
                agent_id, status=JobStatus.QUEUED, limit=n, offset=off
            ),
            limit=V1_PAGE,
        )
        claimed: list[ClaimedJob] = []
        for job in sorted(queued, key=lambda job: job.created_at):
            try:
                claimed.append(client.claim_job(agent_id, job.id, lease_seconds=None))
            except (NotClaimable, NotFound):
                continue
            if len(claimed) == limit:
                break
        return claimed

    @contextmanager
    def claim_by_id_answer(self) -> Iterator[None]:
        """Around a claim by id. For a job that is not claimable, ctrlplane answers a 409
        ``{"message": "Job is not available to claim"}``, without our error code."""
        try:
            yield
        except Conflict as exc:
            if type(exc) is not Conflict:
                raise
            raise NotClaimable(exc.message, details=exc.details, status=exc.status) from exc

    @contextmanager
    def job_by_id_answer(self, job_id: UUID) -> Iterator[None]:
        """Around a read or status update of one job. For a job it holds but cannot reach by id (one
        without a release), ctrlplane answers 404 ``{"message": "Job not found"}`` too. Say so,
        since the job may still be listed and claimable."""
        try:
            yield
        except NotFound as exc:
            # ctrlplane's handler body {"message": "Job not found"} has no code: the client
            # names the request and quotes it (ours carry a code and a message of their own).
            if exc.details is not None or not exc.message.endswith(f"({_CTRLPLANE_NO_JOB})"):
                raise
            message = (
                f"{exc.message}: job {job_id}. ctrlplane answers so also for a job that has no "
                "release: such a job can be listed and claimed but not read or updated by id"
            )
            raise NotFound(message, details=exc.details, status=exc.status) from exc

    def check_lease(self, claimed: ClaimedJob, lease_seconds: int | None) -> None:
        """Say once that the server grants no leases, when a claim asked for one in vain."""
        if claimed.claim_id is None and lease_seconds:
            why = "it granted no lease to a claim that asked for one"
            self.warn_once("no-leases", _NO_LEASE_BY_ID.format(why=why))

    def claim_next_option(self, claim_next: ClaimNext | None) -> ClaimNext | None:
        """A status update's ``claimNext``, or None for a server known to be V1-only."""
        return None if self._facts.v1_only else claim_next

    # --- the claim long-poll --------------------------------------------------------------------

    @contextmanager
    def claim_wait_route(self) -> Iterator[None]:
        """Around ``POST …/jobs/{jobId}/wait``: :class:`LeaseUnsupported` when the server has
        no such route, learned once per process (later calls raise without a request).

        ctrlplane answers a 404/405 without our codes (LeaseUnsupported already). An older
        jobagentctl answers its generic 404 NOT_FOUND, without the ``jobId`` details of our "no such
        job".
        """
        if self._facts.no_wait:
            raise LeaseUnsupported(_NO_WAIT.format(why="learned earlier in this process"))
        try:
            yield
        except (LeaseUnsupported, NotFound) as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            if isinstance(exc, NotFound) and "jobId" in details:
                raise
            self._facts.no_wait = True
            why = f"{Routes.brief('POST', Routes.JOB_WAIT)} answered {exc.status}"
            raise LeaseUnsupported(_NO_WAIT.format(why=why), status=exc.status) from exc

    # --- job logs -------------------------------------------------------------------------------

    def forget_no_logs(self) -> None:
        """The next log call asks the server again, whatever this process learned."""
        self._facts.no_logs = False

    @contextmanager
    def logs_route(self, method: str) -> Iterator[None]:
        """Around ``…/jobs/{jobId}/logs``: :class:`LogsUnsupported` when the server has no such
        route, learned once per process (later calls raise without a request).

        Our server answers every 404 of this route with the code ``LOG_NOT_FOUND``, and 410
        ``LOG_EXPIRED`` for a log past retention. Any other 404 or a 405 means the route itself is
        missing: ctrlplane's (no code of ours: LeaseUnsupported already) or an older jobagentctl's
        generic ``NOT_FOUND``.
        """
        if self._facts.no_logs:
            raise LogsUnsupported(_NO_LOGS.format(why="learned earlier in this process"))
        try:
            yield
        except (LogNotFound, LogExpired):
            raise
        except (LeaseUnsupported, NotFound) as exc:
            if exc.status not in (404, 405):
                raise
            self._facts.no_logs = True
            why = f"{Routes.brief(method, Routes.JOB_LOGS)} answered {exc.status}"
            raise LogsUnsupported(_NO_LOGS.format(why=why), status=exc.status) from exc

    # --- listing and updating jobs --------------------------------------------------------------

    def jobs_of_status(
        self, status: str, limit: int, offset: int, cursor: str | None = None
    ) -> Page[Job]:
        """A page of the workspace's jobs of one status, newest first. ctrlplane's ``GET /jobs`` has
        no ``status`` parameter (its validator answers 400). Then every job is read, and the page is
        a page of the matching ones (such a server gives no cursor)."""
        if not self._facts.no_status_filter:
            try:
                return self.client.jobs_page(
                    status=status, limit=limit, offset=offset, cursor=cursor
                )
            except ValidationError as exc:
                if "status" not in exc.message:
                    raise
                self._facts.no_status_filter = True
        matching = self._filtered.get(status)
        if matching is None:
            every = iter_pages(
                lambda n, off: self.client.jobs_page(limit=n, offset=off), limit=V1_PAGE
            )
            matching = self._filtered[status] = [job for job in every if job.status == status]
        items = matching[offset : offset + limit]
        return Page[Job](items=items, total=len(matching), limit=limit, offset=offset)

    def check_stored(
        self,
        job_id: UUID,
        message: str | None,
        external_id: str | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        """Say once what an accepted status update's server did not store.

        ctrlplane's ``PUT /jobs/{id}/status`` reads only ``status``. No other endpoint of its API
        stores a job's message, external id or metadata; they come only from its
        GitHub/Terraform/Argo webhooks. On a server not known to be V1-only, the job is read back
        once to see.
        """
        fields = (
            ("message", message),
            ("external id", external_id),
            ("metadata (links)", metadata or None),
        )
        sent = [name for name, value in fields if value is not None]
        v1_only = self._facts.v1_only
        if not sent or v1_only is False:
            return
        if v1_only is None:
            try:
                job = self.client.get_job(job_id)
            except Exception:  # best effort: the check never fails an accepted update
                return
            kept = {
                "message": job.message == message,
                "external id": job.external_id == external_id,
                "metadata (links)": all(key in job.metadata for key in metadata or {}),
            }
            sent = [name for name in sent if not kept[name]]
            if not sent:
                self.learned(v1_only=False)
                return
        self.warn_once(
            "not-stored",
            f"the server accepted the status but did not store the {', '.join(sent)}: "
            "its status endpoint reads only the status (as ctrlplane's does)",
        )
