"""A stand-in for ctrlplane's API server, built line by line from ctrlplane's own handlers.

Source followed: ``ctrlplanedev/ctrlplane`` at commit 66e0888e94016296c5e22cdc58fc62617e187a8a:

- ``apps/api/src/server.ts``: express-openapi-validator (``validateRequests: true``, default
  security validation) runs **before** ``requireAuth`` and the routers, on every ``/api`` path;
  ``errorHandler`` (``apps/api/src/middleware/error-handler.ts``) shapes its errors.
- ``apps/api/openapi/openapi.json``: which routes exist, their query parameters and bodies. A path
  the spec does not have answers 404 ``not found``; a documented path with another method 405; a
  query parameter the operation does not declare 400 ``Unknown query parameter 'x'``
  (``allowUnknownQueryParameters`` is off), as ``RequestValidator.processQueryParam`` does.
  The validator's ``BadRequest``/``NotFound``/``MethodNotAllowed`` are not named
  ``ValidationError``, so the error handler answers ``{message, code: error.name, details:
  error.errors}`` (``code`` = ``"Bad Request"``, ``details`` a list).
- ``apps/api/src/middleware/auth.ts``: an unknown key → 401 ``Authentication failed``
  (``AUTH_FAILED``); no key at all is the validator's 401 ``'X-API-Key' header required``.
- ``apps/api/src/types/api.ts``: ``ApiError.toJSON()`` leaves ``code``/``details`` undefined,
  which JSON drops: a handler's 404/409 body is ``{"message": "..."}`` only.
- ``apps/api/src/routes/v1/workspaces/job-agents.ts``: list/get/upsert/delete agents
  (``formatJobAgent`` adds ``metadata: {}``), ``GET …/jobs`` (optional ``status``, newest first,
  ``dispatchContext`` only with ``includeDispatchContext``), ``POST …/jobs/{jobId}/claim`` (the
  conditional ``queued → in_progress`` update; 404 when the job is not the agent's, 409 when
  it is not queued).
- ``apps/api/src/routes/v1/workspaces/jobs.ts``: ``toJobResponse`` (``releaseId: ""`` and
  ``jobAgentId: ""`` when null, optional fields omitted, ``toISOString()`` millisecond
  timestamps), ``GET /jobs`` (only jobs with a release in this workspace; no ``status``
  parameter), ``GET /jobs/{id}``, ``PUT /jobs/{id}/status`` (reads only ``status``; 404 for a job
  without a release; any transition; ``completedAt`` set once on a terminal status).
- ``apps/api/src/routes/v1/workspaces/handlers.ts``: ``GET /workspaces/slug/{slug}``.
- ``packages/db/src/schema/job.ts``: ``job.job_agent_id`` is ``ON DELETE SET NULL`` (deleting an
  agent keeps its jobs), ``updated_at`` has ``$onUpdate`` (a claim bumps it).

The bodies were compared with ctrlplane's real ``apps/api`` at that commit, brought up by
``../shared/ctrlplane/up.sh``: schema errors (``request/query/limit must be >= 1`` with
``details[].errorCode``), the 401s, the slug lookup and its 404, Express's HTML page outside
``/api``, and the 404 of ``GET /jobs/{id}`` and of a status update for a job without a release.

State is in memory. The server is a real HTTP server (Starlette under uvicorn, on a free port, in
a thread of the test process); tests seed jobs directly into the state, as ctrlplane's own e2e
spec seeds them directly into its database.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fixtures.live_server import ServerAddress

CTRLPLANE_COMMIT = "66e0888e94016296c5e22cdc58fc62617e187a8a"

# jobs.ts: dbToOapiStatus / oapiToDbStatus
DB_TO_OAPI = {
    "cancelled": "cancelled",
    "skipped": "skipped",
    "in_progress": "inProgress",
    "action_required": "actionRequired",
    "pending": "pending",
    "failure": "failure",
    "invalid_job_agent": "invalidJobAgent",
    "invalid_integration": "invalidIntegration",
    "external_run_not_found": "externalRunNotFound",
    "successful": "successful",
    "queued": "queued",
}
OAPI_TO_DB = {v: k for k, v in DB_TO_OAPI.items()}
# jobs.ts: terminalStatuses
TERMINAL_DB = {
    "cancelled",
    "skipped",
    "failure",
    "invalid_job_agent",
    "invalid_integration",
    "external_run_not_found",
    "successful",
}


def iso(value: datetime) -> str:
    """JavaScript's ``Date.prototype.toISOString()``: UTC, milliseconds, ``Z``."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def now() -> datetime:
    return datetime.now(UTC)


class HttpError(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(body.get("message"))
        self.status = status
        self.body = body
        self.headers = headers or {}


def api_error(message: str, status: int, code: str | None = None) -> HttpError:
    """``new ApiError(message, status, code)`` through ``errorHandler``: undefined keys dropped."""
    body: dict[str, Any] = {"message": message}
    if code is not None:
        body["code"] = code
    return HttpError(status, body)


def validator_error(status: int, name: str, message: str, path: str) -> HttpError:
    """An express-openapi-validator HttpError through ``errorHandler``'s ``openApiStatus`` arm."""
    return HttpError(
        status, {"message": message, "code": name, "details": [{"path": path, "message": message}]}
    )


def schema_error(where: str, problem: str, keyword: str) -> HttpError:
    """An ajv schema error of a request value (``where``: ``query/limit``, ``body/status``,
    ``body``): the message carries the ``request/`` prefix, its detail does not and names the
    failed keyword (``errorCode``), as the validator's ``BadRequest`` does."""
    detail = {"path": f"/{where}", "message": problem, "errorCode": f"{keyword}.openapi.validation"}
    body = {"message": f"request/{where} {problem}", "code": "Bad Request", "details": [detail]}
    return HttpError(400, body)


# Express's own answer to a path outside /api (finalhandler): an HTML page, not JSON.
EXPRESS_404 = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Error</title>
</head>
<body>
<pre>Cannot {method} {path}</pre>
</body>
</html>
"""


# --- the validator's view of openapi.json (only what the pull-agent surface touches) --------

LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}
OFFSET = {"type": "integer", "minimum": 0}
STATUS = {"enum": list(DB_TO_OAPI.values())}


@dataclass(frozen=True)
class Operation:
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    body: dict[str, Any] | None = None  # {"required": [...], "properties": {...}}


# openapi.json paths (with their documented methods); anything else under /api is "not found".
SPEC: dict[str, dict[str, Operation]] = {
    "/v1/workspaces/slug/{workspaceSlug}": {"get": Operation()},
    "/v1/workspaces/{workspaceId}": {
        "get": Operation(),
        "patch": Operation(),
        "delete": Operation(),
    },
    "/v1/workspaces/{workspaceId}/job-agents": {
        "get": Operation(query={"limit": LIMIT, "offset": OFFSET})
    },
    "/v1/workspaces/{workspaceId}/job-agents/{jobAgentId}": {
        "get": Operation(),
        "put": Operation(
            body={
                "required": ["name", "type", "config"],
                "properties": {
                    "name": {"type": "string"},
                    "type": {"type": "string"},
                    "config": {"type": "object"},
                    "metadata": {"type": "object"},
                },
            }
        ),
        "delete": Operation(),
    },
    "/v1/workspaces/{workspaceId}/job-agents/{jobAgentId}/jobs": {
        "get": Operation(
            query={
                "status": STATUS,
                "includeDispatchContext": {"type": "boolean"},
                "limit": LIMIT,
                "offset": OFFSET,
            }
        )
    },
    "/v1/workspaces/{workspaceId}/job-agents/{jobAgentId}/jobs/{jobId}/claim": {
        "post": Operation()
    },
    "/v1/workspaces/{workspaceId}/jobs": {
        "get": Operation(query={"limit": LIMIT, "offset": OFFSET})
    },
    "/v1/workspaces/{workspaceId}/jobs/{jobId}": {"get": Operation()},
    "/v1/workspaces/{workspaceId}/jobs/{jobId}/status": {
        "put": Operation(body={"required": ["status"], "properties": {"status": STATUS}})
    },
    "/v1/workspaces/{workspaceId}/jobs/{jobId}/with-release": {"get": Operation()},
}
_ROUTES = [
    (re.compile("^" + re.sub(r"\{[^}]+\}", "([^/]+)", path) + "$"), path, ops)
    for path, ops in SPEC.items()
]
# The slug route is declared before /{workspaceId}/… ones so "slug" is not taken for an id.


def _check_value(where: str, value: Any, schema: dict[str, Any]) -> Any:
    """Coerce (query strings, as ajv ``coerceTypes``) and check one value: the value, or the
    validator's 400 (:func:`schema_error`)."""
    kind = schema.get("type")
    if kind == "integer":
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise schema_error(where, "must be integer", "type")
        if "minimum" in schema and value < schema["minimum"]:
            raise schema_error(where, f"must be >= {schema['minimum']}", "minimum")
        if "maximum" in schema and value > schema["maximum"]:
            raise schema_error(where, f"must be <= {schema['maximum']}", "maximum")
    elif kind == "boolean":
        if isinstance(value, str):
            if value not in ("true", "false"):
                raise schema_error(where, "must be boolean", "type")
            value = value == "true"
    elif kind in ("string", "object") and not isinstance(value, str if kind == "string" else dict):
        raise schema_error(where, f"must be {kind}", "type")
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(schema["enum"])
        raise schema_error(where, f"must be equal to one of the allowed values: {allowed}", "enum")
    return value


@dataclass
class Request:
    method: str
    path: str  # under /api
    params: dict[str, str]
    query: dict[str, Any]
    body: Any
    api_key: str | None


@dataclass
class Job:
    id: str
    job_agent_id: str | None
    status: str  # database spelling (in_progress, …)
    created_at: datetime
    updated_at: datetime
    job_agent_config: dict[str, Any] = field(default_factory=dict)
    dispatch_context: dict[str, Any] = field(default_factory=dict)
    external_id: str | None = None
    message: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    release_id: str | None = None  # release_job row
    release_workspace: str | None = None  # release → deployment.workspace_id


class CtrlplaneState:
    """The rows the handlers read and write (guarded by one lock: tests seed from their thread)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.workspaces: dict[str, dict[str, Any]] = {}
        self.api_keys: set[str] = set()
        self.agents: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, Job] = {}
        self.job_metadata: dict[str, dict[str, str]] = {}
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        # (METHOD, path under /api, status, the body's bytes as sent): what -o json must echo.
        self.responses: list[tuple[str, str, int, bytes]] = []

    # --- jobs.ts: toJobResponse ---------------------------------------------------------------
    def job_response(self, j: Job, include_dispatch_context: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": j.id,
            "releaseId": j.release_id or "",
            "jobAgentId": j.job_agent_id or "",
            "jobAgentConfig": j.job_agent_config,
            "status": DB_TO_OAPI.get(j.status, j.status),
            "createdAt": iso(j.created_at),
            "updatedAt": iso(j.updated_at),
            "metadata": dict(self.job_metadata.get(j.id, {})),
        }
        if j.external_id is not None:
            out["externalId"] = j.external_id
        if j.message is not None:
            out["message"] = j.message
        if j.started_at is not None:
            out["startedAt"] = iso(j.started_at)
        if j.completed_at is not None:
            out["completedAt"] = iso(j.completed_at)
        if include_dispatch_context and j.dispatch_context:
            out["dispatchContext"] = j.dispatch_context
        return out


def _uuid(value: str) -> str:
    """A uuid column compared with a non-uuid text: PostgreSQL's error, as a 500."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise HttpError(
            500,
            {
                "message": f'Internal server error: invalid input syntax for type uuid: "{value}"',
                "code": "INTERNAL_ERROR",
                # errorHandler sends the error's stack (a string) as details
                "details": f'error: invalid input syntax for type uuid: "{value}"\n    at …',
            },
        ) from None


def _page(items: list[Any], total: int, limit: int, offset: int) -> dict[str, Any]:
    return {"items": items, "total": total, "limit": limit, "offset": offset}


class Handlers:
    """The route handlers of job-agents.ts, jobs.ts and handlers.ts (slug), in order."""

    def __init__(self, state: CtrlplaneState) -> None:
        self.s = state

    # job-agents.ts ---------------------------------------------------------------------------
    def _format_agent(self, agent: dict[str, Any]) -> dict[str, Any]:
        return {**agent, "metadata": {}}

    def list_job_agents(self, r: Request) -> tuple[int, Any]:
        ws = _uuid(r.params["workspaceId"])
        limit, offset = r.query.get("limit", 50), r.query.get("offset", 0)
        rows = [a for a in self.s.agents.values() if a["workspaceId"] == ws]
        items = [self._format_agent(a) for a in rows[offset : offset + limit]]
        return 200, _page(items, len(rows), limit, offset)

    def _agent(self, ws: str, agent_id: str) -> dict[str, Any]:
        agent = self.s.agents.get(agent_id)
        if agent is None or agent["workspaceId"] != ws:
            raise api_error("Job agent not found", 404)
        return agent

    def get_job_agent(self, r: Request) -> tuple[int, Any]:
        ws, agent_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobAgentId"])
        return 200, self._format_agent(self._agent(ws, agent_id))

    def upsert_job_agent(self, r: Request) -> tuple[int, Any]:
        ws, agent_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobAgentId"])
        body = r.body
        for other in self.s.agents.values():  # uniqueIndex(workspaceId, name)
            same = other["workspaceId"] == ws and other["name"] == body["name"]
            if same and other["id"] != agent_id:
                raise HttpError(
                    500,
                    {
                        "message": "Internal server error: duplicate key value violates "
                        'unique constraint "job_agent_workspace_id_name_index"',
                        "code": "INTERNAL_ERROR",
                    },
                )
        existing = self.s.agents.get(agent_id)
        if existing is not None:  # onConflictDoUpdate(target: id): workspaceId unchanged
            existing.update(name=body["name"], type=body["type"], config=body["config"])
        else:
            self.s.agents[agent_id] = {
                "id": agent_id,
                "workspaceId": ws,
                "name": body["name"],
                "type": body["type"],
                "config": body["config"],
            }
        return 202, {"id": r.params["jobAgentId"], "message": "Job agent update requested"}

    def delete_job_agent(self, r: Request) -> tuple[int, Any]:
        ws, agent_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobAgentId"])
        self._agent(ws, agent_id)
        del self.s.agents[agent_id]
        for job in self.s.jobs.values():  # job.job_agent_id: onDelete "set null"
            if job.job_agent_id == agent_id:
                job.job_agent_id = None
        return 202, {"id": r.params["jobAgentId"], "message": "Job agent deleted"}

    def list_job_agent_jobs(self, r: Request) -> tuple[int, Any]:
        ws, agent_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobAgentId"])
        limit, offset = r.query.get("limit", 50), r.query.get("offset", 0)
        self._agent(ws, agent_id)
        status = r.query.get("status")
        db_status = OAPI_TO_DB.get(status) if status is not None else None
        rows = [
            j
            for j in self.s.jobs.values()
            if j.job_agent_id == agent_id and (db_status is None or j.status == db_status)
        ]
        rows.sort(key=lambda j: j.created_at, reverse=True)  # orderBy(desc(createdAt))
        include = bool(r.query.get("includeDispatchContext", False))
        items = [self.s.job_response(j, include) for j in rows[offset : offset + limit]]
        return 200, _page(items, len(rows), limit, offset)

    def claim_job(self, r: Request) -> tuple[int, Any]:
        ws, agent_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobAgentId"])
        job_id = _uuid(r.params["jobId"])
        self._agent(ws, agent_id)
        job = self.s.jobs.get(job_id)
        if job is not None and job.job_agent_id == agent_id and job.status == "queued":
            job.status, job.started_at = "in_progress", now()
            job.updated_at = job.started_at  # $onUpdate
            return 200, self.s.job_response(job)
        if job is None or job.job_agent_id != agent_id:
            raise api_error("Job not found", 404)
        raise api_error("Job is not available to claim", 409)

    # jobs.ts ---------------------------------------------------------------------------------
    def _in_workspace(self, ws: str) -> list[Job]:
        return [j for j in self.s.jobs.values() if j.release_id and j.release_workspace == ws]

    def get_jobs(self, r: Request) -> tuple[int, Any]:
        ws = _uuid(r.params["workspaceId"])
        limit, offset = r.query.get("limit", 50), r.query.get("offset", 0)
        rows = sorted(self._in_workspace(ws), key=lambda j: j.created_at, reverse=True)
        items = [self.s.job_response(j) for j in rows[offset : offset + limit]]
        return 200, {"items": items, "total": len(rows), "offset": offset, "limit": limit}

    def get_job(self, r: Request) -> tuple[int, Any]:
        ws, job_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobId"])
        job = self.s.jobs.get(job_id)
        if job is None or not job.release_id or job.release_workspace != ws:
            raise api_error("Job not found", 404)
        return 200, self.s.job_response(job)

    def update_job_status(self, r: Request) -> tuple[int, Any]:
        ws, job_id = _uuid(r.params["workspaceId"]), _uuid(r.params["jobId"])
        db_status = OAPI_TO_DB.get(r.body["status"])
        if db_status is None:
            raise api_error("Invalid job status", 400)
        job = self.s.jobs.get(job_id)
        if job is None or not job.release_id or job.release_workspace != ws:
            raise api_error("Job not found", 404)
        job.status, job.updated_at = db_status, now()
        if db_status in TERMINAL_DB and job.completed_at is None:  # COALESCE(completed_at, NOW())
            job.completed_at = job.updated_at
        return 202, {"id": r.params["jobId"], "message": "Job status update requested"}

    # handlers.ts -----------------------------------------------------------------------------
    def get_workspace_by_slug(self, r: Request) -> tuple[int, Any]:
        slug = r.params["workspaceSlug"]
        for ws in self.s.workspaces.values():
            if ws["slug"] == slug:
                return 200, ws
        raise api_error("Workspace not found", 404, "NOT_FOUND")  # NotFoundError

    def get_workspace(self, r: Request) -> tuple[int, Any]:
        ws = self.s.workspaces.get(r.params["workspaceId"])
        if ws is None:
            raise api_error("Workspace not found", 404, "NOT_FOUND")
        return 200, ws

    def table(self) -> dict[tuple[str, str], Callable[[Request], tuple[int, Any]]]:
        w = "/v1/workspaces/{workspaceId}"
        return {
            ("get", "/v1/workspaces/slug/{workspaceSlug}"): self.get_workspace_by_slug,
            ("get", w): self.get_workspace,
            ("get", f"{w}/job-agents"): self.list_job_agents,
            ("get", f"{w}/job-agents/{{jobAgentId}}"): self.get_job_agent,
            ("put", f"{w}/job-agents/{{jobAgentId}}"): self.upsert_job_agent,
            ("delete", f"{w}/job-agents/{{jobAgentId}}"): self.delete_job_agent,
            ("get", f"{w}/job-agents/{{jobAgentId}}/jobs"): self.list_job_agent_jobs,
            ("post", f"{w}/job-agents/{{jobAgentId}}/jobs/{{jobId}}/claim"): self.claim_job,
            ("get", f"{w}/jobs"): self.get_jobs,
            ("get", f"{w}/jobs/{{jobId}}"): self.get_job,
            ("put", f"{w}/jobs/{{jobId}}/status"): self.update_job_status,
            # Not served: jobs.ts getJobWithRelease answers the job with its release's
            # deployment, environment and resource rows, which this stand-in does not keep
            # (and no client command reads). The documented route answers 404, as above.
        }


def _validate(
    method: str, path: str, query: dict[str, str], body: Any, secure: Callable[[str], None]
) -> tuple[str, Request]:
    """express-openapi-validator: route lookup, security (``secure(template)``: the real
    server answers a missing key 401 before it looks at a query), query (coerced), body;
    (template, request)."""
    for pattern, template, ops in _ROUTES:
        match = pattern.match(path)
        if match is None:
            continue
        names = re.findall(r"\{([^}]+)\}", template)
        params = dict(zip(names, match.groups(), strict=True))
        op = ops.get(method.lower())
        if op is None:
            message = f"{method.upper()} method not allowed"
            err = validator_error(405, "Method Not Allowed", message, f"/api{path}")
            err.headers["Allow"] = ", ".join(m.upper() for m in ops)
            raise err
        secure(template)
        coerced = _validate_query(query, op.query)
        if op.body is not None:
            _validate_body(body, op.body)
        return template, Request(method.lower(), path, params, coerced, body, None)
    raise validator_error(404, "Not Found", "not found", f"/api{path}")


def _validate_query(query: dict[str, str], schemas: dict[str, Any]) -> dict[str, Any]:
    """The query's values, coerced; a 400 for a parameter the operation does not take."""
    coerced: dict[str, Any] = {}
    for name, value in query.items():
        if name not in schemas:
            raise validator_error(
                400, "Bad Request", f"Unknown query parameter '{name}'", f"/query/{name}"
            )
        if value == "":
            raise validator_error(
                400,
                "Bad Request",
                f"Empty value found for query parameter '{name}'",
                f"/query/{name}",
            )
        coerced[name] = _check_value(f"query/{name}", value, schemas[name])
    return coerced


def _validate_body(body: Any, schema: dict[str, Any]) -> None:
    """An object with every required property, each property of its schema."""
    if not isinstance(body, dict):
        raise schema_error("body", "must be object", "type")
    for name in schema["required"]:
        if name not in body:
            error = schema_error("body", f"must have required property '{name}'", "required")
            error.body["details"][0]["path"] = f"/body/{name}"
            raise error
    for name, prop in schema["properties"].items():
        if name in body:
            _check_value(f"body/{name}", body[name], prop)


class CtrlplaneStandIn(ServerAddress):
    """The running stand-in: ``url``, ``workspace_id``, ``workspace_slug``, ``api_key``, state.

    Offers the interface of ``tests.fixtures.live_server.ServerAddress`` that the CLI helpers in
    ``tests/integration/cli.py`` use (``url``, ``workspace_id``, ``api_key``, ``env()``,
    ``base_env()``), plus seeding: ``add_agent``, ``seed_job``, ``job``.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.state = CtrlplaneState()
        self.handlers = Handlers(self.state).table()
        self.workspace_id = str(uuid.uuid4())
        self.workspace_slug = f"acme-{secrets.token_hex(3)}"
        self.state.workspaces[self.workspace_id] = {
            "id": self.workspace_id,
            "name": "Acme",
            "slug": self.workspace_slug,
            "createdAt": iso(now()),
        }
        self.api_key = f"ctrl_{secrets.token_urlsafe(24)}"
        self.state.api_keys.add(self.api_key)
        # Called (in the server's thread, state lock held) before each handler runs: a test's
        # way to act "between" two requests of the client, as another agent would.
        self.before: Callable[[Request], None] | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0
        # Read by ServerAddress's url and env: plain HTTP, no CA bundle.
        self.settings = {}
        self.ca_bundle = None
        self._clock = now() - timedelta(hours=1)

    # --- seeding (as the e2e spec inserts rows directly) --------------------------------------
    def add_agent(self, name: str | None = None, *, agent_id: str | None = None) -> str:
        agent = agent_id or str(uuid.uuid4())
        with self.state.lock:
            self.state.agents[agent] = {
                "id": agent,
                "workspaceId": self.workspace_id,
                "name": name or f"pull-agent-{agent[:8]}",
                "type": "http-pull",
                "config": {},
            }
        return agent

    def seed_job(
        self,
        agent_id: str | None,
        status: str = "queued",
        *,
        dispatch_context: dict[str, Any] | None = None,
        job_agent_config: dict[str, Any] | None = None,
        release: bool = True,
        message: str | None = None,
        external_id: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str:
        """A job row (``status`` in database spelling), created one second after the previous.

        ``release=False`` makes a job without ``release_job`` row: listed for its agent and
        claimable, but not in ``/jobs``, not readable by id, and its status cannot be updated.
        """
        job_id = str(uuid.uuid4())
        with self.state.lock:
            self._clock += timedelta(seconds=1)
            created = self._clock
            job = Job(
                id=job_id,
                job_agent_id=agent_id,
                status=status,
                created_at=created,
                updated_at=created,
                job_agent_config=job_agent_config or {},
                dispatch_context=dispatch_context or {},
                external_id=external_id,
                message=message,
                started_at=created if status == "in_progress" else None,
                release_id=str(uuid.uuid4()) if release else None,
                release_workspace=self.workspace_id if release else None,
            )
            self.state.jobs[job_id] = job
            if metadata:
                self.state.job_metadata[job_id] = dict(metadata)
        return job_id

    def job(self, job_id: str) -> Job:
        with self.state.lock:
            return self.state.jobs[job_id]

    def requests(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every request seen so far: (METHOD, path under /api, query)."""
        with self.state.lock:
            return list(self.state.requests)

    def last_response(self, method: str, path_end: str) -> bytes:
        """The body of the last answer to ``METHOD …path_end``, as the bytes that were sent."""
        with self.state.lock:
            for seen, path, _, data in reversed(self.state.responses):
                if seen == method and path.endswith(path_end):
                    return data
        raise AssertionError(f"no response to {method} …{path_end} yet")

    # --- the app ------------------------------------------------------------------------------
    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A plain ASGI app: server.ts's middleware order, then the router."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, payload, headers = self._handle(scope, raw)
        html = isinstance(payload, str)
        if html:
            data = payload.encode()
        else:
            data = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        with self.state.lock:
            self.state.responses.append(
                (scope["method"], scope["path"].removeprefix("/api"), status, data)
            )
        kind = b"text/html; charset=utf-8" if html else b"application/json; charset=utf-8"
        out = [(b"content-type", kind)] if data else []
        out += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        out.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": out})
        await send({"type": "http.response.body", "body": data})

    def _handle(self, scope: dict[str, Any], raw: bytes) -> tuple[int, Any, dict[str, str]]:
        from urllib.parse import parse_qsl

        method: str = scope["method"]
        path: str = scope["path"]
        query = dict(parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=True))
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        with self.state.lock:
            self.state.requests.append((method, path.removeprefix("/api"), dict(query)))
        if path == "/api/healthz" and method == "GET":
            return 200, {"status": "ok"}, {}
        if not path.startswith("/api/"):
            return 404, EXPRESS_404.format(method=method, path=path), {}
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)  # express.json()
            except ValueError:
                # express.json()'s SyntaxError, through errorHandler's fallback arm
                return 400, {"message": "bad JSON", "code": "SyntaxError", "details": None}, {}
        try:
            key = headers.get("x-api-key")

            def secure(template: str) -> None:
                # validateSecurity: an X-API-Key header or a bearer token must be present. Its
                # detail names the route's template ("/api/v1/workspaces/{workspaceId}/jobs").
                if not key and not headers.get("authorization", "").lower().startswith("bearer "):
                    raise validator_error(
                        401, "Unauthorized", "'X-API-Key' header required", f"/api{template}"
                    )

            template, request = _validate(method, path.removeprefix("/api"), query, body, secure)
            # requireAuth (auth.ts): neither a known key nor a session
            if key not in self.state.api_keys:
                raise api_error("Authentication failed", 401, "AUTH_FAILED")
            handler = self.handlers.get((request.method, template))
            if handler is None:  # documented in openapi.json but not served: express 404
                return 404, None, {}
            with self.state.lock:
                if self.before is not None:
                    self.before(request)
                status, payload = handler(request)
            return status, payload, {}
        except HttpError as exc:
            return exc.status, exc.body, exc.headers

    # --- process ------------------------------------------------------------------------------
    def start(self) -> CtrlplaneStandIn:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, interface="asgi3", log_level="warning", lifespan="off", access_log=False
        )
        self._server = uvicorn.Server(config)
        started = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            task = loop.create_task(self._server.serve(sockets=[sock]))

            async def wait_started() -> None:
                while not self._server.started and not task.done():
                    await asyncio.sleep(0.01)
                started.set()

            loop.run_until_complete(wait_started())
            loop.run_until_complete(task)
            loop.close()

        self._thread = threading.Thread(target=serve, name="ctrlplane-standin", daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("the ctrlplane stand-in did not start")
        self._sock = sock
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
        self._sock.close()
