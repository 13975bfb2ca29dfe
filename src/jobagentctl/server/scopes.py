"""Who may see what: the scope checks every service operation starts with (a key sees its own
workspace; an agent key its own agent), each failing as the 404 that hides what is not yours."""

from __future__ import annotations

from uuid import UUID

from jobagentctl.errors import NotFound
from jobagentctl.server.auth import Principal

__all__ = ["Scopes", "no_agent"]


def no_agent(agent_id: UUID) -> NotFound:
    """The 404 of an agent the key may not see (or that does not exist: the same answer)."""
    return NotFound("job agent not found", details={"jobAgentId": str(agent_id)})


class Scopes:
    """The scope checks of :class:`~jobagentctl.server.service.JobService`."""

    @staticmethod
    def _workspace(principal: Principal, ws: UUID) -> None:
        if principal.workspace_id != ws:
            raise NotFound("workspace not found", details={"workspaceId": str(ws)})

    @staticmethod
    def _workspace_key_only(principal: Principal) -> None:
        if principal.agent_id is not None:
            raise NotFound("not found")

    @staticmethod
    def _own_agent(principal: Principal, agent_id: UUID) -> None:
        if principal.agent_id is not None and principal.agent_id != agent_id:
            raise no_agent(agent_id)

    @staticmethod
    def _claims_of(principal: Principal, ws: UUID, agent_id: UUID | None) -> UUID | None:
        """The agent whose claims a listing shows: the one asked for (None: every agent), and
        for an agent key its own (another agent is a 404)."""
        Scopes._workspace(principal, ws)
        if principal.agent_id is None:
            return agent_id
        if agent_id is not None and agent_id != principal.agent_id:
            raise no_agent(agent_id)
        return principal.agent_id
