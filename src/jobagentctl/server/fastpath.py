"""The hot endpoints — claim, claim-next, heartbeat, status — served without framework routing.

An agent loop is nothing but these four calls, so they skip FastAPI's route matching, dependency
resolution and request parsing. Admission (key, size, body, JSON depth) and the response step
(status, metric, log) are the edge's (``edge.py``) and shared with the framework routes; this
module only matches the path against the templates of ``operations.HOT_ROUTES``, parses the
body with the route's model and calls the same operation the framework route calls. Anything
unusual (a query string, a non-canonical id, a body that does not validate) is handed to the
framework, body replayed, so errors and the OpenAPI document stay the framework's.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import ValidationError as PydanticValidationError
from starlette.types import Receive, Scope

from jobagentctl.server.auth import Principal
from jobagentctl.server.operations import HOT_ROUTES, HotRoute, Result
from jobagentctl.server.service import JobService

__all__ = ["FastPath", "match"]

# Each hot route's template split on "/": a literal segment, or None where an id goes.
_COMPILED: tuple[tuple[HotRoute, tuple[str | None, ...]], ...] = tuple(
    (
        route,
        tuple(None if part.startswith("{") else part for part in route.template.split("/")),
    )
    for route in HOT_ROUTES
)


def _uuid(value: str) -> UUID | None:
    # Only the canonical 36-character form: other spellings go to the framework, which decides
    # what it accepts (so both paths agree on every input).
    if len(value) != 36:
        return None
    try:
        return UUID(value)
    except ValueError:
        return None


def match(scope: Scope) -> tuple[HotRoute, list[UUID]] | None:
    """The hot route and its ids, or None (→ the framework)."""
    if scope.get("query_string") or scope.get("root_path"):
        return None
    method = scope["method"]
    parts = scope["path"].split("/")
    for route, segments in _COMPILED:
        if route.method != method or len(segments) != len(parts):
            continue
        ids: list[UUID] = []
        for want, got in zip(segments, parts, strict=True):
            if want is None:
                value = _uuid(got)
                if value is None:
                    return None
                ids.append(value)
            elif want != got:
                break
        else:
            return route, ids
    return None


class FastPath:
    def __init__(self, service: JobService) -> None:
        self.service = service

    async def serve(
        self,
        route: HotRoute,
        ids: list[UUID],
        principal: Principal,
        body: bytes,
        receive: Receive,
    ) -> Result | None:
        """The answer, or None when the framework should answer (it words the 400s)."""
        parsed: Any = None
        if body:
            try:
                parsed = route.model.model_validate_json(body)
            except PydanticValidationError:
                return None
        elif route.body_required:
            return None
        return await route.call(self.service, principal, ids, parsed, receive)
