"""The synchronous API client: one method per endpoint of SPEC §4, typed results.

Requests go through :meth:`Client._call`, the only code that touches the network, so every
failure is translated by :func:`jobagentctl.client._errors.translate` in one place.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote
from uuid import UUID

import httpx
from pydantic import SecretStr, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from jobagentctl import __version__
from jobagentctl.client._errors import translate
from jobagentctl.client._trace import Tracer
from jobagentctl.errors import (
    AuthError,
    ConfigError,
    Conflict,
    LeaseUnsupported,
    NoJob,
    NotClaimable,
    NotFound,
    ValidationError,
)
from jobagentctl.models import (
    MAX_CLAIM_BATCH,
    AcceptedResponse,
    ClaimedJob,
    ClaimedJobs,
    ClaimNext,
    ClaimNextRequest,
    ClaimRequest,
    ClaimState,
    CreateJobRequest,
    Heartbeat,
    HeartbeatRequest,
    Job,
    JobAgent,
    JobAttempt,
    JobClaim,
    JobStatus,
    JobWait,
    JobWaitRequest,
    Page,
    UpdateJobStatusRequest,
    UpsertJobAgentRequest,
    keep_wire,
)

__all__ = ["MEMORY", "USER_AGENT", "Client", "iter_pages"]

USER_AGENT = f"jobagentctl/{__version__}"
API_KEY_HEADER = "X-API-Key"
# Extra read time on top of a long-poll's wait, so the server answers 204 before we give up.
LONG_POLL_MARGIN = 10.0
# When a long-poll comes back empty much sooner than asked (a server that ignores
# waitSeconds), pause this long before asking again instead of spinning.
MIN_POLL_INTERVAL = 1.0

# V1 fallback (a server without claim-next, as ctrlplane): how often to look for queued jobs.
# Each pause is V1_POLL_INTERVAL ± 50 % (jitter), so many agents do not poll in step.
V1_POLL_INTERVAL = 2.0
V1_PAGE = 200

T = TypeVar("T")
_ATTEMPTS = TypeAdapter(list[JobAttempt])
_log = logging.getLogger("jobagentctl.client")


class _ProcessMemory:
    """What this process learned about servers, shared by every :class:`Client` in it.

    ``v1_only[url]``: True once claim-next answered "no such route" (a V1-only server such as
    ctrlplane), False once any V2 route answered. ``slugs[(url, slug)]``: resolved workspace ids.
    ``no_status_filter[url]``: ``GET /jobs`` refused the ``status`` parameter. ``no_wait``: the
    servers without the claim long-poll (``POST …/jobs/{id}/wait``). ``warned``: the one-time
    warnings already given.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.v1_only: dict[str, bool] = {}
        self.slugs: dict[tuple[str, str], UUID] = {}
        self.no_status_filter: set[str] = set()
        self.warned: set[tuple[str, str]] = set()
        self.no_wait: set[str] = set()

    def forget(self) -> None:
        """For tests: start over as a new process would."""
        with self.lock:
            self.v1_only.clear()
            self.slugs.clear()
            self.no_status_filter.clear()
            self.warned.clear()
            self.no_wait.clear()


MEMORY = _ProcessMemory()

_NO_LEASES = (
    "the server has no lease support ({why}): claiming with the V1 API instead (list the "
    "agent's queued jobs, claim one by id). Claims carry no claim id and no lease: heartbeats "
    "are unavailable, and a crash leaves the job inProgress until someone requeues it"
)


_NO_WAIT = (
    "the server has no claim long-poll ({why}): a cancel reaches the command at its next heartbeat"
)


def _base_url(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/api``: the client appends ``/api`` itself."""
    base = url.strip().rstrip("/")
    base = base[: -len("/api")] if base.endswith("/api") else base
    try:
        parsed = httpx.URL(base)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"invalid server URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"invalid server URL {url!r}: use http(s)://host[:port]")
    return base


def _needs_tls(base_url: str) -> bool:
    """Whether to load the CA bundle: not for a plain http:// server (~25 ms of every start).

    Redirects are never followed and every path is relative, so such a client opens no TLS
    connection; unless a proxy from the environment is in the way, which may speak TLS.
    """
    if not base_url.startswith("http://"):
        return True
    import urllib.request

    return bool(urllib.request.getproxies())


def _body(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _claimed_jobs(data: Any) -> list[ClaimedJob]:
    """Claim-next's answer to a ``limit``: ``{"items": [...]}``; one claimed job from a server
    that does not batch (it ignored the ``limit``)."""
    if isinstance(data, dict) and "items" in data and "id" not in data:
        return ClaimedJobs.from_wire(data).items
    return [ClaimedJob.from_wire(data)]


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
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        trace: Callable[[str], None] | None = None,
        warn: Callable[[str], None] | None = None,
        v1_poll_interval: float = V1_POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``workspace`` is a UUID or a slug (resolved on first use, as ctrlc does).

        ``warn`` receives the one-time warnings about what the server cannot do (default: the
        ``jobagentctl.client`` logger, which prints on stderr when nothing else is configured).
        """
        self.url = _base_url(url)
        secret = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key or "")
        self._api_key = SecretStr(secret.get_secret_value().strip())
        self.workspace: UUID | str | None = _workspace(workspace)
        self.timeout = timeout
        self._warn = warn if warn is not None else _log.warning
        self._v1_poll_interval = v1_poll_interval
        self._clock = clock
        self._sleep = sleep
        self._filtered: dict[str, list[Job]] = {}
        hooks: dict[str, list[Callable[..., Any]]] = {}
        if trace is not None:
            tracer = Tracer(trace, redact=(API_KEY_HEADER,))
            hooks = {"request": [tracer.request], "response": [tracer.response]}
        self._http = httpx.Client(
            base_url=f"{self.url}/api",
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            timeout=httpx.Timeout(timeout),
            transport=transport,
            event_hooks=hooks,
            verify=_needs_tls(self.url),
        )

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
        self._http.close()

    # --- plumbing ---------------------------------------------------------------------------

    def _ws(self) -> str:
        return f"/v1/workspaces/{self.workspace_id()}"

    def workspace_id(self) -> UUID:
        """The workspace's id; a slug is resolved once per process with
        ``GET /v1/workspaces/slug/{slug}`` (as ctrlc's ``GetWorkspaceID`` does)."""
        workspace = self.workspace
        if workspace is None:
            raise ConfigError(
                "no workspace: use --workspace, JOBAGENTCTL_WORKSPACE, CTRLPLANE_WORKSPACE or a "
                "config profile"
            )
        if isinstance(workspace, UUID):
            return workspace
        with MEMORY.lock:
            known = MEMORY.slugs.get((self.url, workspace))
        if known is not None:
            return known
        try:
            response = self._call("GET", f"/v1/workspaces/slug/{quote(workspace, safe='')}")
        except NotFound:
            raise NotFound(
                f"no workspace with slug {workspace!r} on {self.url} "
                "(give its id, or check the slug)"
            ) from None
        data = self._parse(response, dict)
        try:
            resolved = UUID(str(data["id"]))
        except (KeyError, ValueError):
            raise translate(ValueError(f"workspace without a valid id: {data!r}")) from None
        with MEMORY.lock:
            MEMORY.slugs[(self.url, workspace)] = resolved
        return resolved

    def _warn_once(self, topic: str, message: str) -> None:
        with MEMORY.lock:
            if (self.url, topic) in MEMORY.warned:
                return
            MEMORY.warned.add((self.url, topic))
        self._warn(message)

    def _learned(self, *, v1_only: bool) -> None:
        with MEMORY.lock:
            MEMORY.v1_only[self.url] = v1_only

    def _v1_only(self) -> bool | None:
        with MEMORY.lock:
            return MEMORY.v1_only.get(self.url)

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        timeout: httpx.Timeout | None = None,
        v2_route: bool = False,
    ) -> httpx.Response:
        """Send one request; any failure leaves as a project error."""
        key = self._api_key.get_secret_value()
        if not key:
            raise AuthError(
                "no API key: set JOBAGENTCTL_API_KEY, use --api-key-file, or put api_key in a "
                "config profile"
            )
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(
                method,
                path,
                json=json,
                params=clean,
                headers={API_KEY_HEADER: key},
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise translate(exc, v2_route=v2_route) from exc
        return response

    def _parse(self, response: httpx.Response, model: Callable[[Any], T]) -> T:
        try:
            return model(response.json())
        except (ValueError, PydanticValidationError) as exc:
            raise translate(exc) from exc

    # --- job agents -------------------------------------------------------------------------

    def upsert_agent(
        self,
        agent_id: UUID,
        name: str,
        type: str,
        config: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> AcceptedResponse:
        body = UpsertJobAgentRequest(name=name, type=type, config=config, metadata=metadata)
        response = self._call("PUT", f"{self._ws()}/job-agents/{agent_id}", json=_body(body))
        return self._parse(response, AcceptedResponse.from_wire)

    def list_agents(self, limit: int = 50, offset: int = 0) -> Page[JobAgent]:
        response = self._call(
            "GET", f"{self._ws()}/job-agents", params={"limit": limit, "offset": offset}
        )
        return self._parse(response, Page[JobAgent].from_wire)

    def get_agent(self, agent_id: UUID) -> JobAgent:
        response = self._call("GET", f"{self._ws()}/job-agents/{agent_id}")
        return self._parse(response, JobAgent.from_wire)

    def delete_agent(self, agent_id: UUID) -> AcceptedResponse:
        response = self._call("DELETE", f"{self._ws()}/job-agents/{agent_id}")
        return self._parse(response, AcceptedResponse.from_wire)

    # --- jobs -------------------------------------------------------------------------------

    def list_agent_jobs(
        self,
        agent_id: UUID,
        *,
        status: JobStatus | str | None = JobStatus.QUEUED,
        include_dispatch_context: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[Job]:
        params: dict[str, Any] = {"status": status, "limit": limit, "offset": offset}
        if include_dispatch_context:
            params["includeDispatchContext"] = "true"
        response = self._call("GET", f"{self._ws()}/job-agents/{agent_id}/jobs", params=params)
        return self._parse(response, Page[Job].from_wire)

    def list_jobs(
        self, *, status: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page[Job]:
        """A page of the workspace's jobs, newest first, optionally of one status.

        ctrlplane's ``GET /jobs`` has no ``status`` parameter (its validator answers 400): then
        the jobs are filtered here, and the page is a page of the matching jobs.
        """
        with MEMORY.lock:
            refused = self.url in MEMORY.no_status_filter
        if status is not None and not refused:
            params = {"status": status, "limit": limit, "offset": offset}
            try:
                response = self._call("GET", f"{self._ws()}/jobs", params=params)
            except ValidationError as exc:
                if "status" not in exc.message:
                    raise
                with MEMORY.lock:
                    MEMORY.no_status_filter.add(self.url)
            else:
                return self._parse(response, Page[Job].from_wire)
        if status is None:
            params = {"limit": limit, "offset": offset}
            response = self._call("GET", f"{self._ws()}/jobs", params=params)
            return self._parse(response, Page[Job].from_wire)
        matching = self._filtered.get(status)
        if matching is None:
            every = iter_pages(lambda n, off: self.list_jobs(limit=n, offset=off), limit=V1_PAGE)
            matching = [job for job in every if job.status == status]
            self._filtered[status] = matching
        return Page[Job](
            items=matching[offset : offset + limit], total=len(matching), limit=limit, offset=offset
        )

    def get_job(self, job_id: UUID) -> Job:
        response = self._call("GET", f"{self._ws()}/jobs/{job_id}")
        return self._parse(response, Job.from_wire)

    def create_job(
        self,
        agent_id: UUID,
        *,
        job_agent_config: dict[str, Any] | None = None,
        dispatch_context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Job:
        body = CreateJobRequest(
            job_agent_config=job_agent_config, dispatch_context=dispatch_context, metadata=metadata
        )
        response = self._call(
            "POST", f"{self._ws()}/job-agents/{agent_id}/jobs", json=_body(body), v2_route=True
        )
        return self._parse(response, Job.from_wire)

    # --- claims and leases ------------------------------------------------------------------

    def claim_job(self, agent_id: UUID, job_id: UUID, *, lease_seconds: int | None) -> ClaimedJob:
        """Claim one job by id (V1 route). ``lease_seconds=None`` sends no body, as V1 agents do."""
        body = None if lease_seconds is None else _body(ClaimRequest(lease_seconds=lease_seconds))
        try:
            response = self._call(
                "POST", f"{self._ws()}/job-agents/{agent_id}/jobs/{job_id}/claim", json=body
            )
        except Conflict as exc:
            if type(exc) is not Conflict:
                raise
            # ctrlplane answers 409 {"message": "Job is not available to claim"}, without code.
            raise NotClaimable(exc.message, details=exc.details, status=exc.status) from exc
        claimed = self._parse(response, ClaimedJob.from_wire)
        if claimed.claim_id is None and lease_seconds:
            self._warn_once(
                "no-leases",
                _NO_LEASES.format(why="it granted no lease to a claim that asked for one"),
            )
        return claimed

    def claim_next(
        self, agent_id: UUID, *, lease_seconds: int | None, wait_seconds: float | None
    ) -> ClaimedJob:
        """Claim the agent's oldest queued job; :class:`NoJob` when none came within the wait.

        On a server without claim-next (it answers 404: a V1-only server such as ctrlplane;
        learned once per process), does what ctrlplane's RFC 0014 asks of V1 agents: list the
        agent's queued jobs, claim the oldest by id, the next one on 409, and poll (with
        jitter) until ``wait_seconds`` runs out. Such a claim has no claim id and no lease.
        """
        if self._v1_only():
            return self._claim_next_v1(agent_id, wait_seconds)[0]
        try:
            response = self._post_claim_next(
                agent_id, lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=None
            )
        except LeaseUnsupported as exc:
            self._learned(v1_only=True)
            why = f"POST …/job-agents/{{id}}/claim answered {exc.status}"
            self._warn_once("no-leases", _NO_LEASES.format(why=why))
            return self._claim_next_v1(agent_id, wait_seconds)[0]
        except NoJob:
            self._learned(v1_only=False)
            raise
        self._learned(v1_only=False)
        return self._parse(response, ClaimedJob.from_wire)

    def claim_batch(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float | None,
        limit: int,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` of the agent's oldest queued jobs in one request (claim-next's
        ``limit``), each with its own claim; :class:`NoJob` when none came within the wait.

        A server that ignores ``limit`` (an older jobagentctl) answers one job: that is the
        batch. On a V1-only server the jobs are claimed by id, one request each, as
        :meth:`claim_next` does.
        """
        if not 1 <= limit <= MAX_CLAIM_BATCH:
            raise ConfigError(f"limit must be between 1 and {MAX_CLAIM_BATCH}")
        if self._v1_only():
            return self._claim_next_v1(agent_id, wait_seconds, limit)
        try:
            response = self._post_claim_next(
                agent_id, lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=limit
            )
        except LeaseUnsupported as exc:
            self._learned(v1_only=True)
            why = f"POST …/job-agents/{{id}}/claim answered {exc.status}"
            self._warn_once("no-leases", _NO_LEASES.format(why=why))
            return self._claim_next_v1(agent_id, wait_seconds, limit)
        except NoJob:
            self._learned(v1_only=False)
            raise
        self._learned(v1_only=False)
        return self._parse(response, _claimed_jobs)

    def _claim_next_v1(
        self, agent_id: UUID, wait_seconds: float | None, limit: int = 1
    ) -> list[ClaimedJob]:
        deadline = self._clock() + (wait_seconds or 0.0)
        while True:
            claimed: list[ClaimedJob] = []
            for job in self._queued_oldest_first(agent_id):
                try:
                    claimed.append(self.claim_job(agent_id, job.id, lease_seconds=None))
                except (NotClaimable, NotFound):
                    continue  # another agent took it (409), or it went away: the next one
                if len(claimed) == limit:
                    break
            if claimed:
                return claimed
            left = deadline - self._clock()
            if left <= 0:
                raise NoJob("no job queued for this agent")
            self._sleep(min(left, self._v1_poll_interval * random.uniform(0.5, 1.5)))

    def _queued_oldest_first(self, agent_id: UUID) -> list[Job]:
        """The agent's queued jobs, oldest first (ctrlplane lists them newest first)."""
        queued = list(
            iter_pages(
                lambda n, off: self.list_agent_jobs(
                    agent_id, status=JobStatus.QUEUED, limit=n, offset=off
                ),
                limit=V1_PAGE,
            )
        )
        return sorted(queued, key=lambda job: job.created_at)

    def _post_claim_next(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float | None,
        limit: int | None,
    ) -> httpx.Response:
        body = ClaimNextRequest(lease_seconds=lease_seconds, wait_seconds=wait_seconds, limit=limit)
        timeout = None
        if wait_seconds:
            # The read must outlast the server's wait, or we would give up on a healthy long-poll.
            timeout = httpx.Timeout(
                self.timeout, read=wait_seconds + self.timeout + LONG_POLL_MARGIN
            )
        response = self._call(
            "POST",
            f"{self._ws()}/job-agents/{agent_id}/claim",
            json=_body(body),
            timeout=timeout,
            v2_route=True,
        )
        if response.status_code == 204:
            raise NoJob("no job queued for this agent", status=204)
        return response

    def wait_for_job(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> ClaimedJob:
        """Long-poll :meth:`claim_next` until a job comes or ``wait_seconds`` (may be inf) pass.

        The server caps each long-poll (``maxWaitSeconds``), so a longer wait is several polls.
        """
        jobs = self.wait_for_jobs(
            agent_id,
            lease_seconds=lease_seconds,
            wait_seconds=wait_seconds,
            limit=None,
            clock=clock,
            sleep=sleep,
        )
        return jobs[0]

    def wait_for_jobs(
        self,
        agent_id: UUID,
        *,
        lease_seconds: int | None,
        wait_seconds: float,
        limit: int | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[ClaimedJob]:
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
        self, job_id: UUID, *, claim_id: UUID | None, lease_seconds: int | None = None
    ) -> Heartbeat:
        body = HeartbeatRequest(claim_id=claim_id, lease_seconds=lease_seconds)
        response = self._call(
            "POST", f"{self._ws()}/jobs/{job_id}/heartbeat", json=_body(body), v2_route=True
        )
        self._learned(v1_only=False)
        return self._parse(response, Heartbeat.from_wire)

    def wait_claim(self, job_id: UUID, *, claim_id: UUID, wait_seconds: float) -> JobWait:
        """Long-poll until the claim ``claim_id`` of the job is no longer held (cancelled,
        released, reaped, completed: ``claim_held`` False) or the wait runs out (True; the
        server caps it at its ``maxWaitSeconds``). The read timeout outlasts the wait.

        :class:`LeaseUnsupported` when the server has no such endpoint (ctrlplane, an older
        jobagentctl): learned once per process, later calls raise it without a request.
        """
        with MEMORY.lock:
            missing = self.url in MEMORY.no_wait
        if missing:
            raise LeaseUnsupported(_NO_WAIT.format(why="learned earlier in this process"))
        body = JobWaitRequest(claim_id=claim_id, wait_seconds=float(wait_seconds))
        timeout = httpx.Timeout(self.timeout, read=wait_seconds + self.timeout + LONG_POLL_MARGIN)
        path = f"{self._ws()}/jobs/{job_id}/wait"
        try:
            response = self._call("POST", path, json=_body(body), timeout=timeout, v2_route=True)
        except (LeaseUnsupported, NotFound) as exc:
            # ctrlplane answers a 404/405 without our codes (LeaseUnsupported); an older
            # jobagentctl answers its generic 404 NOT_FOUND, without the jobId details that
            # our "no such job" carries.
            details = exc.details if isinstance(exc.details, dict) else {}
            if isinstance(exc, NotFound) and "jobId" in details:
                raise
            with MEMORY.lock:
                MEMORY.no_wait.add(self.url)
            why = f"POST …/jobs/{{id}}/wait answered {exc.status}"
            raise LeaseUnsupported(_NO_WAIT.format(why=why), status=exc.status) from exc
        return self._parse(response, JobWait.from_wire)

    def update_status(
        self,
        job_id: UUID,
        status: JobStatus | str,
        *,
        claim_id: UUID | None = None,
        message: str | None = None,
        external_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        claim_next: ClaimNext | None = None,
    ) -> AcceptedResponse:
        """Set the job's status. ``claim_next`` (with ``claim_id``, ending the attempt): the
        same request claims the agent's next jobs, listed in the answer's ``claimed`` — which
        stays None from a server that does not do this (ctrlplane, an older jobagentctl), where
        the caller claims as usual. Not sent to a server known to be V1-only."""
        if claim_next is not None and self._v1_only():
            claim_next = None
        try:
            body = UpdateJobStatusRequest(
                status=JobStatus(status),
                claim_id=claim_id,
                message=message,
                external_id=external_id,
                metadata=metadata,
                claim_next=claim_next,
            )
        except (ValueError, PydanticValidationError) as exc:
            raise ConfigError(f"invalid status update: {exc}") from None
        response = self._call("PUT", f"{self._ws()}/jobs/{job_id}/status", json=_body(body))
        accepted = self._parse(response, AcceptedResponse.from_wire)
        if message is not None or external_id is not None or metadata:
            self._check_stored(job_id, message, external_id, metadata)
        return accepted

    def _check_stored(
        self,
        job_id: UUID,
        message: str | None,
        external_id: str | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        """Say once what a status update's server did not store.

        ctrlplane's ``PUT /jobs/{id}/status`` reads only ``status``, and no other endpoint of
        its API stores a job's message, external id or metadata (they come only from its
        GitHub/Terraform/Argo webhooks). On a server not known to be V1-only, the job is read
        back once to see.
        """
        v1_only = self._v1_only()
        if v1_only is False:
            return
        dropped: list[str] = []
        if v1_only is None:
            try:
                job = self.get_job(job_id)
            except Exception:  # best effort: the check never fails an accepted update
                return
            if message is not None and job.message != message:
                dropped.append("message")
            if external_id is not None and job.external_id != external_id:
                dropped.append("external id")
            if metadata and any(k not in job.metadata for k in metadata):
                dropped.append("metadata (links)")
            if not dropped:
                self._learned(v1_only=False)
                return
        else:
            dropped = [
                name
                for name, value in (
                    ("message", message),
                    ("external id", external_id),
                    ("metadata (links)", metadata or None),
                )
                if value is not None
            ]
        self._warn_once(
            "not-stored",
            f"the server accepted the status but did not store the {', '.join(dropped)}: "
            "its status endpoint reads only the status (as ctrlplane's does)",
        )

    def release(self, job_id: UUID, *, claim_id: UUID | None) -> AcceptedResponse:
        """Give the job back to the queue (status ``queued``), ending this attempt."""
        return self.update_status(job_id, JobStatus.QUEUED, claim_id=claim_id)

    def list_claims(
        self,
        *,
        agent_id: UUID | None = None,
        state: ClaimState | str = ClaimState.ALL,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[JobClaim]:
        params = {
            "jobAgentId": agent_id,
            "state": ClaimState(state).value,
            "limit": limit,
            "offset": offset,
        }
        response = self._call("GET", f"{self._ws()}/job-claims", params=params, v2_route=True)
        return self._parse(response, Page[JobClaim].from_wire)

    def list_attempts(self, job_id: UUID) -> list[JobAttempt]:
        response = self._call("GET", f"{self._ws()}/jobs/{job_id}/attempts", v2_route=True)
        return self._parse(response, lambda data: keep_wire(_ATTEMPTS.validate_python(data), data))


def _workspace(value: UUID | str | None) -> UUID | str | None:
    """A UUID stays a UUID (also in text form); any other text is a slug; empty is unset."""
    if value is None or isinstance(value, UUID):
        return value
    text = value.strip()
    if not text:
        return None
    try:
        return UUID(text)
    except ValueError:
        return text


def iter_pages(fetch: Callable[[int, int], Page[T]], *, limit: int = 200) -> Iterator[T]:
    """Every item of a paginated list: ``fetch(limit, offset)`` until ``total`` is reached."""
    offset = 0
    while True:
        page = fetch(limit, offset)
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return
