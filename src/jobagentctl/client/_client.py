"""The synchronous API client: one method per endpoint of SPEC §4, typed results.

Requests go through :meth:`Client._call`, the only code that touches the network, so every
failure is translated by :func:`jobagentctl.client._errors.translate` in one place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

import httpx
from pydantic import SecretStr, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from jobagentctl import __version__
from jobagentctl.client._errors import translate
from jobagentctl.client._trace import Tracer
from jobagentctl.errors import AuthError, ConfigError, NoJob
from jobagentctl.models import (
    AcceptedResponse,
    ClaimedJob,
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
    Page,
    UpdateJobStatusRequest,
    UpsertJobAgentRequest,
)

__all__ = ["USER_AGENT", "Client", "iter_pages"]

USER_AGENT = f"jobagentctl/{__version__}"
API_KEY_HEADER = "X-API-Key"
# Extra read time on top of a long-poll's wait, so the server answers 204 before we give up.
LONG_POLL_MARGIN = 10.0
# When a long-poll comes back empty much sooner than asked (a server that ignores
# waitSeconds), pause this long before asking again instead of spinning.
MIN_POLL_INTERVAL = 1.0

T = TypeVar("T")
_ATTEMPTS = TypeAdapter(list[JobAttempt])


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


class Client:
    """A client for one workspace of a jobagentctl (or ctrlplane) server.

    ``url`` is the base URL with or without ``/api``. The key is checked before the first
    request: a missing key raises :class:`AuthError` without touching the network.
    """

    def __init__(
        self,
        url: str,
        api_key: str | SecretStr | None,
        workspace: UUID | None,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self.url = _base_url(url)
        secret = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key or "")
        self._api_key = SecretStr(secret.get_secret_value().strip())
        self.workspace = workspace
        self.timeout = timeout
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
        if self.workspace is None:
            raise ConfigError(
                "no workspace: use --workspace, JOBAGENTCTL_WORKSPACE or a config profile"
            )
        return f"/v1/workspaces/{self.workspace}"

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
        return self._parse(response, AcceptedResponse.model_validate)

    def list_agents(self, limit: int = 50, offset: int = 0) -> Page[JobAgent]:
        response = self._call(
            "GET", f"{self._ws()}/job-agents", params={"limit": limit, "offset": offset}
        )
        return self._parse(response, Page[JobAgent].model_validate)

    def get_agent(self, agent_id: UUID) -> JobAgent:
        response = self._call("GET", f"{self._ws()}/job-agents/{agent_id}")
        return self._parse(response, JobAgent.model_validate)

    def delete_agent(self, agent_id: UUID) -> AcceptedResponse:
        response = self._call("DELETE", f"{self._ws()}/job-agents/{agent_id}")
        return self._parse(response, AcceptedResponse.model_validate)

    # --- jobs -------------------------------------------------------------------------------

    def list_agent_jobs(
        self,
        agent_id: UUID,
        *,
        status: str | None = "queued",
        include_dispatch_context: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[Job]:
        params: dict[str, Any] = {"status": status, "limit": limit, "offset": offset}
        if include_dispatch_context:
            params["includeDispatchContext"] = "true"
        response = self._call("GET", f"{self._ws()}/job-agents/{agent_id}/jobs", params=params)
        return self._parse(response, Page[Job].model_validate)

    def list_jobs(
        self, *, status: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page[Job]:
        params = {"status": status, "limit": limit, "offset": offset}
        response = self._call("GET", f"{self._ws()}/jobs", params=params)
        return self._parse(response, Page[Job].model_validate)

    def get_job(self, job_id: UUID) -> Job:
        response = self._call("GET", f"{self._ws()}/jobs/{job_id}")
        return self._parse(response, Job.model_validate)

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
        return self._parse(response, Job.model_validate)

    # --- claims and leases ------------------------------------------------------------------

    def claim_job(self, agent_id: UUID, job_id: UUID, *, lease_seconds: int | None) -> ClaimedJob:
        """Claim one job by id (V1 route). ``lease_seconds=None`` sends no body, as V1 agents do."""
        body = None if lease_seconds is None else _body(ClaimRequest(lease_seconds=lease_seconds))
        response = self._call(
            "POST", f"{self._ws()}/job-agents/{agent_id}/jobs/{job_id}/claim", json=body
        )
        return self._parse(response, ClaimedJob.model_validate)

    def claim_next(
        self, agent_id: UUID, *, lease_seconds: int | None, wait_seconds: float | None
    ) -> ClaimedJob:
        """Claim the agent's oldest queued job; :class:`NoJob` when none came within the wait."""
        body = ClaimNextRequest(lease_seconds=lease_seconds, wait_seconds=wait_seconds)
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
        return self._parse(response, ClaimedJob.model_validate)

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
        deadline = clock() + wait_seconds
        while True:
            remaining = deadline - clock()
            ask = 0.0 if remaining <= 0 else (3600.0 if math.isinf(remaining) else remaining)
            ask = round(ask, 3)  # milliseconds are plenty; keeps request bodies readable
            started = clock()
            try:
                return self.claim_next(agent_id, lease_seconds=lease_seconds, wait_seconds=ask)
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
        return self._parse(response, Heartbeat.model_validate)

    def update_status(
        self,
        job_id: UUID,
        status: JobStatus | str,
        *,
        claim_id: UUID | None = None,
        message: str | None = None,
        external_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AcceptedResponse:
        try:
            body = UpdateJobStatusRequest(
                status=JobStatus(status),
                claim_id=claim_id,
                message=message,
                external_id=external_id,
                metadata=metadata,
            )
        except (ValueError, PydanticValidationError) as exc:
            raise ConfigError(f"invalid status update: {exc}") from None
        response = self._call("PUT", f"{self._ws()}/jobs/{job_id}/status", json=_body(body))
        return self._parse(response, AcceptedResponse.model_validate)

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
        return self._parse(response, Page[JobClaim].model_validate)

    def list_attempts(self, job_id: UUID) -> list[JobAttempt]:
        response = self._call("GET", f"{self._ws()}/jobs/{job_id}/attempts", v2_route=True)
        return self._parse(response, _ATTEMPTS.validate_python)


def iter_pages(fetch: Callable[[int, int], Page[T]], *, limit: int = 200) -> Iterator[T]:
    """Every item of a paginated list: ``fetch(limit, offset)`` until ``total`` is reached."""
    offset = 0
    while True:
        page = fetch(limit, offset)
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return
