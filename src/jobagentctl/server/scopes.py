"""Who may see what: the scope checks every service operation starts with.

A key sees its own workspace; an agent key its own agent. Each check fails as the 404 that hides
what is not yours.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from jobagentctl.errors import NotFound
from jobagentctl.server.http.auth import Principal

__all__ = [
    "claims_scope",
    "no_agent",
    "require_own_agent",
    "require_workspace",
    "require_workspace_key",
]


def no_agent(agent_id: UUID) -> NotFound:
    """The 404 of an agent the key may not see (or that does not exist: the same answer)."""
    return NotFound("job agent not found", details={"jobAgentId": str(agent_id)})


def require_workspace(
    principal: Principal, ws: UUID, *, error: Callable[[], Exception] | None = None
) -> None:
    """Raise unless the key belongs to workspace ``ws``.

    ``error`` builds the 404 to raise; by default the workspace's own ``NotFound``.
    """
    if principal.workspace_id != ws:
        if error is not None:
            raise error()
        raise NotFound("workspace not found", details={"workspaceId": str(ws)})


def require_workspace_key(principal: Principal) -> None:
    """Raise ``NotFound`` for an agent key: the call is a workspace key's only."""
    if principal.agent_id is not None:
        raise NotFound("not found")


def require_own_agent(principal: Principal, agent_id: UUID) -> None:
    """Raise the agent's 404 when an agent key names another agent."""
    if principal.agent_id is not None and principal.agent_id != agent_id:
        raise no_agent(agent_id)


def claims_scope(principal: Principal, ws: UUID, agent_id: UUID | None) -> UUID | None:
    """The agent whose claims a listing shows.

    It is the one asked for (None: every agent). For an agent key it is its own; another agent is
    a 404.
    """
    require_workspace(principal, ws)
    if principal.agent_id is None:
        return agent_id
    if agent_id is not None and agent_id != principal.agent_id:
        raise no_agent(agent_id)
    return principal.agent_id
