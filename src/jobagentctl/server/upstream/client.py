"""A small client of ctrlplane's V1 API, for the gateway (the server never imports ours).

Only what the gateway needs: the workspace by slug or id, the agents, an agent's jobs by
status. Also a claim by id, a job, a status update. The API key for ctrlplane is held here.
It is only sent in the ``X-API-Key`` header: never logged, never in an error message or a
metric label.
Every request is counted and timed (``UpstreamMetrics``) by operation and outcome.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from uuid import UUID

import httpx

from jobagentctl.errors import JobAgentError, ServerUnavailable
from jobagentctl.models import JobStatus
from jobagentctl.routes import Routes
from jobagentctl.server.upstream.metrics import UpstreamMetrics

__all__ = ["UpstreamClient", "UpstreamRefused", "UpstreamUnavailable"]

# httpx logs every request at INFO: the gateway's own metrics count them instead.
logging.getLogger("httpx").setLevel(logging.WARNING)

# Seconds one request to ctrlplane may take, by default (setting ``upstream_timeout``).
REQUEST_TIMEOUT = 10.0


class UpstreamUnavailable(ServerUnavailable, code="UPSTREAM_UNAVAILABLE", http_status=503):
    """ctrlplane cannot be reached, timed out, or answered 408/429/5xx: try again later.
    ``sent`` is False only when the request surely never reached ctrlplane (no connection)."""

    sent: bool = True


class UpstreamRefused(JobAgentError, code="UPSTREAM_REFUSED", http_status=502):
    """ctrlplane answered a 4xx other than 408/429: ``status`` is its status code."""


def _transient(status: int) -> bool:
    return status in (408, 429) or status >= 500


class UpstreamClient:
    """One per gateway process: a pooled HTTP client with ctrlplane's key, a base URL that
    may be given with or without ``/api``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        metrics: UpstreamMetrics | None = None,
        *,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/api") else f"{root}/api"
        self.metrics = metrics or UpstreamMetrics()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"X-API-Key": api_key, "Accept": "application/json"},
            timeout=timeout,
        )

    def __repr__(self) -> str:  # never the key
        return f"UpstreamClient({self.base_url!r})"

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        op: str,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
    ) -> tuple[int, Any]:
        """``(status, body)`` of a 2xx answer; ``UpstreamRefused`` (4xx) or
        ``UpstreamUnavailable`` (no answer, 408, 429, 5xx) otherwise."""
        began = time.monotonic()
        try:
            response = await self._http.request(method, path, params=params, json=json)
        except httpx.HTTPError as exc:
            self.metrics.observe(op, "error", time.monotonic() - began)
            # The exception's text names the URL, never the key (headers are not in it).
            error = UpstreamUnavailable(
                f"ctrlplane unreachable: {type(exc).__name__}", details={"operation": op}
            )
            error.sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
            raise error from None
        elapsed = time.monotonic() - began
        status = response.status_code
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        if 200 <= status < 300:
            self.metrics.observe(op, "ok", elapsed)
            return status, body
        message = body.get("message") if isinstance(body, dict) else None
        details = {"operation": op, "upstreamStatus": status, "upstreamMessage": message}
        if _transient(status):
            self.metrics.observe(op, "error", elapsed)
            raise UpstreamUnavailable(f"ctrlplane answered {status}", details=details)
        self.metrics.observe(op, "refused", elapsed)
        raise UpstreamRefused(
            f"ctrlplane answered {status}: {message}", details=details, status=status
        )

    # --- workspaces and agents ---------------------------------------------------------------
    async def workspace(self, slug_or_id: str) -> dict[str, Any]:
        """The workspace of that id (a UUID) or slug, as ctrlplane answers it."""
        try:
            UUID(slug_or_id)
        except ValueError:
            path = Routes.path(Routes.WORKSPACE_BY_SLUG, slug=slug_or_id)
        else:
            path = Routes.path(Routes.WORKSPACE, ws=slug_or_id)
        _, body = await self._call("workspace", "GET", path)
        return dict(body)

    async def list_agents(self, ws: UUID) -> list[dict[str, Any]]:
        _, body = await self._call(
            "list_agents", "GET", Routes.path(Routes.AGENTS, ws=ws), params={"limit": 1000}
        )
        return list(body.get("items", []))

    async def get_agent(self, ws: UUID, agent_id: UUID) -> dict[str, Any]:
        _, body = await self._call(
            "get_agent", "GET", Routes.path(Routes.AGENT, ws=ws, agentId=agent_id)
        )
        return dict(body)

    async def upsert_agent(self, ws: UUID, agent_id: UUID, body: dict[str, Any]) -> None:
        await self._call(
            "upsert_agent", "PUT", Routes.path(Routes.AGENT, ws=ws, agentId=agent_id), json=body
        )

    async def delete_agent(self, ws: UUID, agent_id: UUID) -> None:
        await self._call(
            "delete_agent", "DELETE", Routes.path(Routes.AGENT, ws=ws, agentId=agent_id)
        )

    # --- jobs --------------------------------------------------------------------------------
    async def agent_jobs(
        self,
        ws: UUID,
        agent_id: UUID,
        status: str | None,
        *,
        limit: int = 100,
        offset: int = 0,
        dispatch_context: bool = False,
    ) -> dict[str, Any]:
        """One page of the agent's jobs (newest first, as ctrlplane lists them)."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is not None:
            params["status"] = status
        if dispatch_context:
            params["includeDispatchContext"] = "true"
        _, body = await self._call(
            "list_agent_jobs",
            "GET",
            Routes.path(Routes.AGENT_JOBS, ws=ws, agentId=agent_id),
            params=params,
        )
        return dict(body)

    async def oldest_queued(self, ws: UUID, agent_id: UUID, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` of the agent's oldest queued jobs, oldest first, with their dispatch
        context. One request, or two when more are queued than one page holds. ctrlplane lists
        newest first, so the oldest are on the last page."""
        page = await self.agent_jobs(
            ws, agent_id, JobStatus.QUEUED.value, limit=count, dispatch_context=True
        )
        total = int(page.get("total", 0))
        if total > count:
            page = await self.agent_jobs(
                ws,
                agent_id,
                JobStatus.QUEUED.value,
                limit=count,
                offset=total - count,
                dispatch_context=True,
            )
        items = list(page.get("items", []))
        items.sort(key=lambda job: (str(job.get("createdAt", "")), str(job.get("id", ""))))
        return items

    async def claim(self, ws: UUID, agent_id: UUID, job_id: UUID) -> dict[str, Any]:
        _, body = await self._call(
            "claim", "POST", Routes.path(Routes.CLAIM, ws=ws, agentId=agent_id, jobId=job_id)
        )
        return dict(body)

    async def get_job(self, ws: UUID, job_id: UUID) -> dict[str, Any]:
        _, body = await self._call("get_job", "GET", Routes.path(Routes.JOB, ws=ws, jobId=job_id))
        return dict(body)

    async def list_jobs(self, ws: UUID, limit: int, offset: int) -> dict[str, Any]:
        _, body = await self._call(
            "list_jobs",
            "GET",
            Routes.path(Routes.JOBS, ws=ws),
            params={"limit": limit, "offset": offset},
        )
        return dict(body)

    async def set_status(self, ws: UUID, job_id: UUID, status: str) -> None:
        """ctrlplane's status update reads ``status`` only (jobs.ts): the rest of a report
        (message, external id, metadata) stays in our store."""
        await self._call(
            "set_status",
            "PUT",
            Routes.path(Routes.JOB_STATUS, ws=ws, jobId=job_id),
            json={"status": status},
        )

    async def ping(self) -> bool:
        """Whether ctrlplane answers at all (any HTTP answer counts: ``/readyz``'s gauge)."""
        try:
            await self._http.get(Routes.path(Routes.WORKSPACE_BY_SLUG, slug="-"), timeout=1.0)
        except httpx.HTTPError:
            return False
        return True
