"""The API's paths, written once: the server routes them, the client requests them.

A template's ``{name}`` parts are filled by the client (``Routes.path``) and matched by the server;
the template itself is the latency metric's ``route`` label. Nothing else in ``src/`` writes a
path of the API by hand (tests/unit/codebase/test_vocabulary.py holds it so).
"""

from __future__ import annotations

from urllib.parse import quote

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
    WORKSPACE = _WS  # ctrlplane's (the gateway reads its upstream workspace by id)
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
    JOB_LOGS = f"{_WS}/jobs/{{jobId}}/logs"
    CLAIMS_URGENT = f"{_WS}/job-claims/urgent"

    @staticmethod
    def path(template: str, **parts: object) -> str:
        """``template`` with its ``{name}`` parts filled, relative to ``API_PREFIX`` (the
        client's base URL ends in ``/api``). Each part is percent-encoded as one path segment,
        so a slug or an id can never reach another route."""
        filled = {name: quote(str(value), safe="") for name, value in parts.items()}
        return template.format(**filled).removeprefix(API_PREFIX)

    @staticmethod
    def brief(method: str, template: str) -> str:
        """How a message names a workspace route: ``POST …/jobs/{jobId}/wait``."""
        return f"{method} …{template.removeprefix(_WS)}"
