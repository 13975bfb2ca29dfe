"""The hot endpoints — claim, claim-next, heartbeat, status, log append — served without routing.

An agent loop is nothing but these four calls (and, while a command runs, log appends). So they
skip FastAPI's route matching, dependency resolution and request parsing.

Admission (key, size, body, JSON depth) and the response step (status, metric, log) are the
edge's (``edge.py``), shared with the framework routes. This module only does three things:

- match the path against the templates of the endpoints marked ``hot`` in ``operations.py``;
- parse the body with the operation's body model;
- call the operation the framework route calls.

Anything unusual (a query string, a non-canonical id, a body that does not validate) is handed
to the framework, body replayed. So errors and the OpenAPI document stay the framework's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from starlette.types import Receive, Scope

from jobagentctl.server.http.auth import Principal
from jobagentctl.server.http.encoding import Result
from jobagentctl.server.http.operations import ENDPOINTS, Call, Endpoint
from jobagentctl.server.service import JobService

__all__ = ["FastPath", "HotRoute", "match"]


@dataclass(frozen=True, slots=True)
class HotRoute:
    """A hot endpoint as the fast path matches it, with its body's model.

    Its template is split on "/": a literal segment, or None where an id goes.
    ``body_required``: no body is a 400, the framework's to word.
    """

    endpoint: Endpoint
    segments: tuple[str | None, ...]
    model: type[BaseModel]
    body_required: bool

    @classmethod
    def of(cls, endpoint: Endpoint) -> HotRoute:
        """The fast path's view of ``endpoint``, whose operation takes a ``body``."""
        model, required = endpoint.body()
        segments = tuple(None if p.startswith("{") else p for p in endpoint.template.split("/"))
        return cls(endpoint, segments, model, required)


def _index(routes: list[HotRoute]) -> dict[tuple[str, int, str], HotRoute]:
    """The hot routes by method, number of segments and last segment. One lookup finds the only
    candidate for a path: each hot template ends in a literal, and no two share all three."""
    index = {(r.endpoint.method, len(r.segments), r.segments[-1] or ""): r for r in routes}
    if len(index) != len(routes) or "" in {last for _, _, last in index}:
        raise RuntimeError("hot routes must each end in a distinct literal segment")
    return index


_HOT = _index([HotRoute.of(endpoint) for endpoint in ENDPOINTS if endpoint.hot])


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
    parts = scope["path"].split("/")
    route = _HOT.get((scope["method"], len(parts), parts[-1]))
    if route is None:
        return None
    ids: list[UUID] = []
    for want, got in zip(route.segments, parts, strict=True):
        if want is None:
            value = _uuid(got)
            if value is None:
                return None
            ids.append(value)
        elif want != got:
            return None
    return route, ids


class FastPath:
    """Serves a matched hot route through its operation, without the framework."""

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
        operation = route.endpoint.operation
        content = await operation(Call(self.service, principal, receive), *ids, parsed)
        return route.endpoint.answer(content)
