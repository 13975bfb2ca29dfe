"""The synchronous API client: one method per endpoint of the pull-agent API, typed results.

Each endpoint is one request and one parse through :class:`Connection`, on a path built from
:class:`jobagentctl.routes.Routes`. What differs on a server that speaks only the V1 API
(ctrlplane) is handed to :class:`V1Fallback` (``_ctrlplane.py``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any
from uuid import UUID

from pydantic import SecretStr, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from jobagentctl import models
from jobagentctl.client._connection import Connection, ConnectionOptions, parse
from jobagentctl.client._ctrlplane import MEMORY, V1Fallback, V1Pacing
from jobagentctl.errors import ConfigError, NoJob, NotFound
from jobagentctl.models import MAX_CLAIM_BATCH, ClaimState, JobStatus, keep_wire
from jobagentctl.routes import Routes

__all__ = ["Client"]

# When a long-poll comes back empty much sooner than asked (a server that ignores
# waitSeconds), pause this long before asking again instead of spinning.
MIN_POLL_INTERVAL = 1.0
NO_WORKSPACE = (
    "no workspace: use --workspace, JOBAGENTCTL_WORKSPACE, CTRLPLANE_WORKSPACE or a config profile"
)

_ATTEMPTS = TypeAdapter(list[models.JobAttempt])
_log = logging.getLogger("jobagentctl.client")


def _claimed_jobs(data: Any) -> list[models.ClaimedJob]:
    """Claim-next's answer: ``{"items": [...]}`` to a ``limit``; one claimed job without one,
    or from a server that does not batch (it ignored the ``limit``)."""
    if isinstance(data, dict) and "items" in data and "id" not in data:
        return models.ClaimedJobs.from_wire(data).items
    return [models.ClaimedJob.from_wire(data)]


def _is_batch(response: Any) -> bool:
    """Whether claim-next answered a batch (``{"items": …}``), not one job."""
    try:
        data = response.json()
    except ValueError:
        return False
    return isinstance(data, dict) and "items" in data and "id" not in data


def _attempts(data: Any) -> list[models.JobAttempt]:
    return keep_wire(_ATTEMPTS.validate_python(data), data)


class Client:
    """A client for one workspace of a jobagentctl (or ctrlplane) server.

    ``url`` is the base URL with or without ``/api``. The key is checked before the first
    request: a missing key raises :class:`AuthError` without touching the network.
    """

    def __init__(
        self,
        url: str,
        api_key: str | SecretStr | None,
        workspace: UUID | str | None,
        options: ConnectionOptions | None = None,
        *,
        warn: Callable[[str], None] | None = None,
        v1: V1Pacing | None = None,
    ) -> None:
        """``workspace`` is a UUID or a slug (resolved on first use, as ctrlc does).

        - ``options``: how the server is reached (timeout, CA bundle, trace, transport).
        - ``warn`` receives the one-time warnings about what the server cannot do.
          Its default is the ``jobagentctl.client`` logger, which prints on stderr when nothing
          else is configured.
        - ``v1`` paces the claims on a V1-only server.
        """
        options = options if options is not None else ConnectionOptions()
        self._conn = Connection(url, api_key, options)
        self.url = self._conn.url
        self.workspace: UUID | str | None = models.Workspace.reference(workspace)
        self.timeout = options.timeout
        warn = warn if warn is not None else _log.warning  # not `or`: a sink may be falsy
        self._v1 = V1Fallback(self, warn, v1 if v1 is not None else V1Pacing())

    def __repr__(self) -> str:
        return f"Client(url={self.url!r}, workspace={self.workspace!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (a ``with`` block does it on leaving)."""
        self._conn.close()

    def interrupt(self) -> None:
        """End the requests in flight at once (from another thread): a ``run`` told to stop
        while its claim long-poll waits (:meth:`Connection.interrupt`)."""
        self._conn.interrupt()

    # --- the workspace ----------------------------------------------------------------------

    def workspace_id(self) -> UUID:
        """The workspace's id, without a request when it was given as one.

        :class:`ConfigError` (exit 2) when no workspace is set. A slug is resolved once per
        process with ``GET /v1/workspaces/slug/{slug}`` (as ctrlc's ``GetWorkspaceID`` does).
        """
        workspace = self.workspace
        if workspace is None:
            raise ConfigError(NO_WORKSPACE)
        if isinstance(workspace, UUID):
            return workspace
        slugs = MEMORY.of(self.url).slugs
        if workspace not in slugs:
            slugs[workspace] = self.workspace_by_slug(workspace).id
        return slugs[workspace]

    def workspace_by_slug(self, slug: str) -> models.Workspace:
        """The workspace of that slug; :class:`NotFound` (exit 5) when there is none."""
        try:
            return self._conn.call(
                "GET", Routes.path(Routes.WORKSPACE_BY_SLUG, slug=slug), models.Workspace.from_wire
            )
        except NotFound:
            raise NotFound(
                f"no workspace with slug {slug!r} on {self.url} (give its id, or check the slug)"
            ) from None

    def _at(self, template: str, **parts: object) -> str:
        """The path of a workspace route (``Routes.*``) in this client's workspace."""
        return Routes.path(template, ws=self.workspace_id(), **parts)

    # --- job agents -------------------------------------------------------------------------

    def upsert_agent(
        self,
        agent_id: UUID,
        name: str,
        type: str,
        config: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> models.AcceptedResponse:
        """Create the agent, or replace its name, type, config and metadata."""
        body = models.UpsertJobAgentRequest(name=name, type=type, config=config, metadata=metadata)
        path = self._at(Routes.AGENT, agentId=agent_id)
        return self._conn.call("PUT", path, models.AcceptedResponse.from_wire, body=body)

    def list_agents(
        self, limit: int = 50, offset: int = 0, state: models.AgentState | None = None
    ) -> models.Page[models.JobAgent]:
        """A page of the workspace's agents (only those in ``state``, when the server knows agent
        presence). A server that does not ignores the filter and sends no ``state``."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if state is not None:
            params["state"] = models.AgentState(state).value
        return self._conn.call(
            "GET", self._at(Routes.AGENTS), models.Page[models.JobAgent].from_wire, params=params
        )

    def get_agent(self, agent_id: UUID) -> models.JobAgent:
        """One agent; :class:`NotFound` when it does not exist."""
        return self._conn.call(
            "GET", self._at(Routes.AGENT, agentId=agent_id), models.JobAgent.from_wire
        )

    def delete_agent(self, agent_id: UUID) -> models.AcceptedResponse:
        """Delete the agent (its jobs stay, without an agent)."""
        path = self._at(Routes.AGENT, agentId=agent_id)
        return self._conn.call("DELETE", path, models.AcceptedResponse.from_wire)

    # --- jobs -------------------------------------------------------------------------------

    def list_agent_jobs(
        self,
        agent_id: UUID,
        *,
        status: JobStatus | str | None = JobStatus.QUEUED,
        include_dispatch_context: bool = False,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> models.Page[models.Job]:
        """A page of the agent's jobs of one status (any status for None), newest first;
        ``cursor``: a page's ``next_cursor``, for the page after it."""
        params: dict[str, Any] = {
            "status": status,
            "limit": limit,
            "offset": offset,
            "cursor": cursor,
        }
        if include_dispatch_context:
            params["includeDispatchContext"] = "true"
        path = self._at(Routes.AGENT_JOBS, agentId=agent_id)
        return self._conn.call("GET", path, models.Page[models.Job].from_wire, params=params)

    def list_jobs(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> models.Page[models.Job]:
        """A page of the workspace's jobs, newest first, optionally of one status (filtered
        here when the server cannot: :meth:`V1Fallback.jobs_of_status`); ``cursor``: a
        page's ``next_cursor``, for the page after it."""
        if status is None:
            return self.jobs_page(limit=limit, offset=offset, cursor=cursor)
        return self._v1.jobs_of_status(status, limit, offset, cursor)

    def jobs_page(
        self,
        *,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
        cursor: str | None = None,
    ) -> models.Page[models.Job]:
        """``GET /jobs`` as the server answers it (a server without the ``status`` filter
        refuses it: :class:`ValidationError`)."""
        params = {"status": status, "limit": limit, "offset": offset, "cursor": cursor}
        return self._conn.call(
            "GET", self._at(Routes.JOBS), models.Page[models.Job].from_wire, params=params
        )

    def get_job(self, job_id: UUID) -> models.Job:
        """One job; :class:`NotFound` when it does not exist."""
        with self._v1.job_by_id_answer(job_id):
            return self._conn.call("GET", self._at(Routes.JOB, jobId=job_id), models.Job.from_wire)

    def create_job(
        self,
        agent_id: UUID,
        *,
        job_agent_config: dict[str, Any] | None = None,
        dispatch_context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> models.Job:
        """Queue a new job for the agent (a jobagentctl server's addition to the API)."""
        body = models.CreateJobRequest(
            job_agent_config=job_agent_config, dispatch_context=dispatch_context, metadata=metadata
        )
        path = self._at(Routes.AGENT_JOBS, agentId=agent_id)
        return self._conn.call("POST", path, models.Job.from_wire, body=body, v2_route=True)

    # --- claims and leases ------------------------------------------------------------------

    def claim_job(
        self, agent_id: UUID, job_id: UUID, *, lease_seconds: int | None
    ) -> models.ClaimedJob:
        """Claim one job by id (V1 route). ``lease_seconds=None`` sends no body, as V1 agents do;
        :class:`NotClaimable` when the job is not queued for this agent."""
        body = None if lease_seconds is None else models.ClaimRequest(lease_seconds=lease_seconds)
        path = self._at(Routes.CLAIM, agentId=agent_id, jobId=job_id)
        with self._v1.claim_by_id_answer():
            claimed = self._conn.call("POST", path, models.ClaimedJob.from_wire, body=body)
        self._v1.check_lease(claimed, lease_seconds)
        return claimed

    def claim_next(
        self, agent_id: UUID, *, lease_seconds: int | None, wait_seconds: float | None
    ) -> models.ClaimedJob:
        """Claim the agent's oldest queued job; :class:`NoJob` when none came within the wait.

        On a server without claim-next (a V1-only server such as ctrlplane; learned once per
        process), the job is claimed by id. It then has no claim id and no lease
        (:meth:`V1Fallback.claim`).
        """
        return self._v1.claim(
            agent_id, lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=None
        )[0]

    def claim_batch(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float | None,
        limit: int,
    ) -> list[models.ClaimedJob]:
        """Claim up to ``limit`` of the agent's oldest queued jobs in one request (claim-next's
        ``limit``). Each has its own claim; :class:`NoJob` when none came within the wait.

        A server that ignores ``limit`` (an older jobagentctl) answers one job: that is the
        batch. On a V1-only server the jobs are claimed by id, one request each, as
        :meth:`claim_next` does.
        """
        if not 1 <= limit <= MAX_CLAIM_BATCH:
            raise ConfigError(f"limit must be between 1 and {MAX_CLAIM_BATCH}")
        return self._v1.claim(
            agent_id, lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=limit
        )

    def claim_next_request(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float | None,
        limit: int | None,
    ) -> list[models.ClaimedJob]:
        """Claim-next itself, once: the claimed jobs (one without a ``limit``); :class:`NoJob`
        on 204, :class:`LeaseUnsupported` when the server has no such route."""
        body = models.ClaimNextRequest(
            lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=limit
        )
        response = self._conn.send(
            "POST",
            self._at(Routes.CLAIM_NEXT, agentId=agent_id),
            body=body,
            wait_seconds=wait_seconds or None,
            v2_route=True,
        )
        if response.status_code == 204:
            raise NoJob("no job queued for this agent", status=204)
        claimed = parse(response, _claimed_jobs)
        if limit is not None and limit > 1 and not _is_batch(response):
            # A server before claim batches takes the request without its `limit`: say so
            # once, or the user would think one job was all there was.
            self._v1.warn_once(
                "claim-limit",
                f"the server ignored the claim's limit of {limit} (it predates claim batches): "
                "it claims one job per request",
            )
        return claimed

    def wait_for_job(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> models.ClaimedJob:
        """Long-poll :meth:`claim_next` until a job comes or ``wait_seconds`` (may be inf) pass.

        The server caps each long-poll (``maxWaitSeconds``), so a longer wait is several polls.
        """
        return self.wait_for_jobs(
            agent_id,
            lease_seconds=lease_seconds,
            wait_seconds=wait_seconds,
            limit=None,
            clock=clock,
            sleep=sleep,
        )[0]

    def wait_for_jobs(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float,
        limit: int | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[models.ClaimedJob]:
        """As :meth:`wait_for_job`; ``limit`` given: up to that many (:meth:`claim_batch`)."""
        deadline = clock() + wait_seconds
        while True:
            remaining = deadline - clock()
            ask = 0.0 if remaining <= 0 else (3600.0 if math.isinf(remaining) else remaining)
            ask = round(ask, 3)  # milliseconds are plenty; keeps request bodies readable
            started = clock()
            try:
                if limit is None:
                    return [
                        self.claim_next(agent_id, lease_seconds=lease_seconds, wait_seconds=ask)
                    ]
                return self.claim_batch(
                    agent_id, lease_seconds=lease_seconds, wait_seconds=ask, limit=limit
                )
            except NoJob:
                left = deadline - clock()
                if left <= 0:
                    raise
                if clock() - started < min(ask, MIN_POLL_INTERVAL):
                    sleep(min(MIN_POLL_INTERVAL, left))

    def heartbeat(
        self,
        job_id: UUID,
        *,
        claim_id: UUID | None,
        lease_seconds: int | None = None,
        last_output_at: datetime | None = None,
    ) -> models.Heartbeat:
        """Renew the claim's lease (``lease_seconds``: a new length; ``last_output_at``: when
        the job's command last printed, kept for the claim's quiet time); :class:`ClaimLost`
        when the claim ended, :class:`LeaseUnsupported` on a server without leases."""
        body = models.HeartbeatRequest(
            claim_id=claim_id, lease_seconds=lease_seconds, last_output_at=last_output_at
        )
        path = self._at(Routes.HEARTBEAT, jobId=job_id)
        response = self._conn.send("POST", path, body=body, v2_route=True)
        self._v1.learned(v1_only=False)
        return parse(response, models.Heartbeat.from_wire)

    def wait_claim(self, job_id: UUID, *, claim_id: UUID, wait_seconds: float) -> models.JobWait:
        """Long-poll until the claim ``claim_id`` of the job is no longer held (cancelled,
        released, reaped, completed: ``claim_held`` False) or the wait runs out (True; the
        server caps it at its ``maxWaitSeconds``). The read timeout outlasts the wait.

        :class:`LeaseUnsupported` when the server has no such endpoint (ctrlplane, an older
        jobagentctl): learned once per process, later calls raise it without a request.
        """
        body = models.JobWaitRequest(claim_id=claim_id, wait_seconds=float(wait_seconds))
        path = self._at(Routes.JOB_WAIT, jobId=job_id)
        with self._v1.claim_wait_route():
            return self._conn.call(
                "POST",
                path,
                models.JobWait.from_wire,
                body=body,
                wait_seconds=wait_seconds,
                v2_route=True,
            )

    def update_status(
        self,
        job_id: UUID,
        status: JobStatus | str,
        *,
        claim_id: UUID | None = None,
        message: str | None = None,
        external_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        claim_next: models.ClaimNext | None = None,
        force: bool = False,
    ) -> models.AcceptedResponse:
        """Set the job's status. ``force`` (an operator's, without ``claim_id``): a claim still held
        ends without waiting for its agent to let go (sent only when True). ``claim_next`` (with
        ``claim_id``, ending the attempt): the same request claims the agent's next jobs, listed in
        the answer's ``claimed``. A server that does not do this (ctrlplane, an older jobagentctl)
        leaves ``claimed`` None; the caller then claims as usual. Not sent to a server known to be
        V1-only.

        What the server did not store of ``message``, ``external_id`` and ``metadata`` is said
        once (:meth:`V1Fallback.check_stored`)."""
        try:
            body = models.UpdateJobStatusRequest(
                status=JobStatus(status),
                claim_id=claim_id,
                message=message,
                external_id=external_id,
                metadata=metadata,
                claim_next=self._v1.claim_next_option(claim_next),
                force=force or None,
            )
        except (ValueError, PydanticValidationError) as exc:
            raise ConfigError(f"invalid status update: {exc}") from None
        path = self._at(Routes.JOB_STATUS, jobId=job_id)
        with self._v1.job_by_id_answer(job_id):
            accepted = self._conn.call("PUT", path, models.AcceptedResponse.from_wire, body=body)
        self._v1.check_stored(job_id, message, external_id, metadata)
        return accepted

    def release(self, job_id: UUID, *, claim_id: UUID | None) -> models.AcceptedResponse:
        """Give the job back to the queue (status ``queued``), ending this attempt."""
        return self.update_status(job_id, JobStatus.QUEUED, claim_id=claim_id)

    def list_claims(
        self,
        *,
        agent_id: UUID | None = None,
        state: ClaimState | str = ClaimState.ALL,
        limit: int = 50,
        offset: int = 0,
    ) -> models.Page[models.JobClaim]:
        """A page of the workspace's claims (of one agent, in one state)."""
        wanted = ClaimState(state).value
        params = {"jobAgentId": agent_id, "state": wanted, "limit": limit, "offset": offset}
        path = self._at(Routes.CLAIMS)
        return self._conn.call(
            "GET", path, models.Page[models.JobClaim].from_wire, params=params, v2_route=True
        )

    def urgent_claims(
        self,
        *,
        agent_id: UUID | None = None,
        state: ClaimState | str = ClaimState.ALL,
        stale_after: float | None = None,
        quiet_after: float | None = None,
        limit: int = 50,
    ) -> models.UrgentClaims:
        """The ``limit`` most urgent claims and the count of each kind. Most urgent are the expired,
        unleased or silent for ``stale_after`` seconds, then the nearest expiry. A server without
        the route (older than 0.4) answers :class:`LeaseUnsupported` or a :class:`NotFound` without
        details."""
        params = {
            "jobAgentId": agent_id,
            "state": ClaimState(state).value,
            "staleAfter": stale_after,
            "quietAfter": quiet_after,
            "limit": limit,
        }
        path = self._at(Routes.CLAIMS_URGENT)
        return self._conn.call(
            "GET", path, models.UrgentClaims.from_wire, params=params, v2_route=True
        )

    def list_attempts(self, job_id: UUID) -> list[models.JobAttempt]:
        """Every attempt (claim) of the job, oldest first."""
        path = self._at(Routes.ATTEMPTS, jobId=job_id)
        return self._conn.call("GET", path, _attempts, v2_route=True)

    # --- job logs (…/jobs/{jobId}/logs) ------------------------------------------------------

    def append_logs(
        self, job_id: UUID, claim_id: UUID, chunks: Sequence[models.LogChunkIn]
    ) -> models.LogAppendResult:
        """Append output chunks to the log of the attempt that ``claim_id`` holds. Each is at most
        ``models.LOG_CHUNK_MAX_BYTES`` raw, and the request within the server's body limit (1 MiB by
        default). Errors:

        - :class:`ClaimLost` / :class:`ClaimMismatch` when the claim is not the job's current one
          (nothing written);
        - :class:`LogsUnsupported` on a server without logs (ctrlplane, an older jobagentctl),
          learned once per process."""
        body = models.LogAppendRequest(claim_id=claim_id, chunks=list(chunks))
        path = self._at(Routes.JOB_LOGS, jobId=job_id)
        with self._v1.logs_route("POST"):
            return self._conn.call(
                "POST", path, models.LogAppendResult.from_wire, body=body, v2_route=True
            )

    def recheck_logs(self) -> None:
        """Forget that the server was found without logs: the next call asks it again (a
        long-lived ``run --loop`` outlives its server's upgrade)."""
        self._v1.forget_no_logs()

    def read_logs(
        self,
        job_id: UUID,
        *,
        attempt: int | None = None,
        after: int = 0,
        wait_seconds: float | None = None,
        limit: int | None = None,
    ) -> models.LogPage:
        """The chunks of an attempt's log (None: the latest attempt) after seq ``after``.
        ``wait_seconds``: when there are none yet and the attempt runs, the server waits up to that
        long for some, or for the attempt's end. Its ``maxWaitSeconds`` caps the wait. Errors:

        - :class:`LogNotFound` for an unknown job or attempt;
        - :class:`LogExpired` for a log past the server's retention;
        - :class:`LogsUnsupported` on a server without logs."""
        params = {"attempt": attempt, "after": after, "waitSeconds": wait_seconds, "limit": limit}
        path = self._at(Routes.JOB_LOGS, jobId=job_id)
        with self._v1.logs_route("GET"):
            return self._conn.call(
                "GET",
                path,
                models.LogPage.from_wire,
                params=params,
                wait_seconds=wait_seconds,
                v2_route=True,
            )
