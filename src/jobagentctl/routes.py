"""The API's paths, written once: the server routes them, the client requests them.

A template's ``{name}`` parts are filled by the client (``Routes.path``) and matched by the server;
the template itself is the latency metric's ``route`` label.
"""

from __future__ import annotations

from typing import Any

__all__ = ["API_PREFIX", "V1_PREFIX", "Routes"]

API_PREFIX = "/api"
V1_PREFIX = f"{API_PREFIX}/v1/"
_WS = f"{API_PREFIX}/v1/workspaces/{{ws}}"


class Routes:
    """Every path template of the API, written once."""

    HEALTHZ = "/healthz"
    READYZ = "/readyz"
    METRICS = "/metrics"
    WORKSPACE_BY_SLUG = f"{API_PREFIX}/v1/workspaces/slug/{{slug}}"
    AGENTS = f"{_WS}/job-agents"
    AGENT = f"{_WS}/job-agents/{{agentId}}"
    AGENT_JOBS = f"{_WS}/job-agents/{{agentId}}/jobs"
    CLAIM = f"{_WS}/job-agents/{{agentId}}/jobs/{{jobId}}/claim"
    CLAIM_NEXT = f"{_WS}/job-agents/{{agentId}}/claim"
    JOBS = f"{_WS}/jobs"
    JOB = f"{_WS}/jobs/{{jobId}}"
    JOB_STATUS = f"{_WS}/jobs/{{jobId}}/status"
    HEARTBEAT = f"{_WS}/jobs/{{jobId}}/heartbeat"
    ATTEMPTS = f"{_WS}/jobs/{{jobId}}/attempts"
    CLAIMS = f"{_WS}/job-claims"
    JOB_WAIT = f"{_WS}/jobs/{{jobId}}/wait"

    @staticmethod
    def path(template: str, **parts: Any) -> str:
        """``template`` with its ``{name}`` parts filled, relative to ``API_PREFIX`` (the
        client's base URL ends in ``/api``)."""
        return template.format(**{k: str(v) for k, v in parts.items()}).removeprefix(API_PREFIX)
