"""Agent presence: when each agent was last seen, recorded without a write per request.

Every request made for an agent counts as seeing it: claim, long-poll, heartbeat, its status
reports, the listing of its jobs. This process writes that to the store at most once per agent per
``interval`` seconds. The throttle is in memory, per server process: N replicas write at most N
times per interval. ``agents list`` judges the state from the stored time and a window.

A write names the request's workspace and changes nothing unless the agent is of it. A key of
another workspace naming the agent (answered 404) must not make it look alive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from uuid import UUID

from jobagentctl.errors import JobAgentError
from jobagentctl.server.store import Store

__all__ = ["Presence"]

logger = logging.getLogger("jobagentctl.server")

# Past this many agents remembered, those not seen for an interval are forgotten (their next
# request writes again, as it would anyway).
_PRUNE_AT = 10_000


class Presence:
    """The throttled writer of ``job_agent_presence`` for one server process."""

    def __init__(
        self, store: Store, interval: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self.interval = interval
        self._clock = clock
        # By (workspace, agent): a foreign workspace's request naming an agent must not take
        # the slot of the agent's own requests either.
        self._written: dict[tuple[UUID, UUID], float] = {}
        self.writes = 0  # presence writes sent by this process (tests count them)

    async def seen(self, workspace_id: UUID, agent_id: UUID | None) -> None:
        """The agent was seen now by a request on ``workspace_id``'s paths. Write it unless this
        process did within the interval. Nothing happens when the agent is not of that workspace.
        Never raises: presence is bookkeeping, the request it rides on must not fail for it."""
        if agent_id is None:
            return
        now = self._clock()
        slot = (workspace_id, agent_id)
        last = self._written.get(slot)
        if last is not None and now - last < self.interval:
            return
        if len(self._written) >= _PRUNE_AT:
            self._written = {a: t for a, t in self._written.items() if now - t < self.interval}
        # Marked before the write: concurrent requests of the same agent write once.
        self._written[slot] = now
        self.writes += 1
        try:
            await self._store.entities.touch_agent(workspace_id, agent_id)
        except JobAgentError as exc:
            logger.debug("presence of agent %s not recorded: %s", agent_id, exc)
