"""Long-polls waiting for a job: per-agent events woken one per job queued.

The one poller of a process wakes them for what it cannot hear.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import suppress
from uuid import UUID

from jobagentctl.errors import JobAgentError

__all__ = ["Mark", "QueuedCounts", "Waiters"]

# What a poller asks the database: for each of these agents, how many jobs are queued ({} when
# there is nothing to ask, e.g. no other process has written since the last poll).
QueuedCounts = Callable[[list[UUID]], Awaitable[Mapping[UUID, int]]]
# What :meth:`Waiters.mark` returns: compared, it tells whether a wake-up signal came since.
Mark = tuple[int, int]
# Agents whose signals are counted before the counts are reset (a reset changes every mark).
_MAX_SIGNALLED = 100_000


class Waiters:
    """Per-agent events for ``wait_for_job``, first come first woken; lives on one event loop
    (the server's). ``notify(agent, n)`` wakes at most ``n`` waiters: one per job queued, so an
    enqueue costs one claim attempt however many long-polls wait; ``ensure_all`` is the
    poller's."""

    def __init__(self) -> None:
        # dict as an ordered set: the oldest waiter is woken first.
        self._events: dict[UUID, dict[asyncio.Event, None]] = {}
        self._poller: asyncio.Task[None] | None = None
        # Wake-up signals per agent since the last reset (``_epoch``), waiters or not: a
        # long-poll that marked them before its claim attempt can tell, once registered,
        # whether a job may have been queued in between without asking the database.
        self._signalled: dict[UUID, int] = {}
        self._epoch = 0

    def mark(self, agent_id: UUID) -> Mark:
        """Take before a claim attempt; hand to :meth:`wait` as ``since``."""
        return self._epoch, self._signalled.get(agent_id, 0)

    def start_poller(self, interval: float, queued: QueuedCounts) -> None:
        """Start the one poller of this process (see ``_poll``), asking ``queued``."""
        self._poller = asyncio.create_task(_poll(self, interval, queued), name="jobagentctl-poller")

    async def stop_poller(self) -> None:
        """Stop the poller, if it runs."""
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with suppress(asyncio.CancelledError):
                await poller

    async def wait(
        self,
        agent_id: UUID,
        timeout: float,
        queued: Callable[[], Awaitable[bool]],
        *,
        since: Mark | None = None,
        last: bool = False,
    ) -> bool:
        """Up to ``timeout`` seconds for a job of ``agent_id``: True as soon as ``queued()`` says
        one is there or a wake-up comes, False when the time is up.

        ``since``: the :meth:`mark` taken before the caller's claim attempt; the queue is not
        asked first unless a signal came since. ``last``: the caller's whole wait ends with
        this one, and its next claim attempt asks the queue anyway. So the queue is not asked at
        the end either: an empty long-poll then costs the database its claim attempt alone.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = self.register(agent_id)
        consumed = False
        # Asked after registering, so a job queued since the caller's claim attempt is never
        # missed between that attempt and the signal. Without a signal since the mark, one
        # queued here is either signalled to the event from now on (this process's enqueues,
        # LISTEN/NOTIFY) or found by the poller, which asks for every agent with waiters.
        ask = since is None or since != self.mark(agent_id)
        try:
            while True:
                if ask and await queued():
                    consumed = True
                    return True
                ask = True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                # Woken by this process's enqueues, LISTEN/NOTIFY or the connector's poller;
                # at the end the queue is asked once more (the caller's safety slice).
                if await _wait_event(event, remaining):
                    consumed = True
                    return True
                if last:
                    return False
        finally:
            self.unregister(agent_id, event, consumed=consumed)

    def register(self, agent_id: UUID) -> asyncio.Event:
        """A new waiter of ``agent_id``: its event is set when it is woken."""
        event = asyncio.Event()
        self._events.setdefault(agent_id, {})[event] = None
        return event

    def unregister(self, agent_id: UUID, event: asyncio.Event, *, consumed: bool) -> None:
        """``consumed`` False: the waiter leaves without acting on a wake-up it got (cancelled,
        client gone). So the wake-up goes to the next waiter instead of being lost."""
        events = self._events.get(agent_id)
        if events is not None:
            events.pop(event, None)
            if not events:
                del self._events[agent_id]
        if event.is_set() and not consumed:
            self.notify(agent_id, 1)

    def notify(self, agent_id: UUID, jobs: int = 1) -> None:
        """``jobs`` jobs were queued for ``agent_id``: wake as many of its sleeping waiters."""
        if len(self._signalled) >= _MAX_SIGNALLED:
            self._signalled.clear()
            self._epoch += 1
        self._signalled[agent_id] = self._signalled.get(agent_id, 0) + 1
        left = jobs
        for event in self._events.get(agent_id, {}):
            if left <= 0:
                break
            if not event.is_set():
                event.set()
                left -= 1

    def ensure_all(self, counts: Mapping[UUID, int]) -> None:
        """For every agent of ``counts`` (jobs queued per agent), as many waiters awake as it
        has jobs queued, counting those woken already."""
        for agent_id, jobs in counts.items():
            events = self._events.get(agent_id, {})
            awake = sum(1 for event in events if event.is_set())
            if jobs > awake:
                self.notify(agent_id, jobs - awake)

    def notify_all(self) -> None:
        """Wake every waiter: after a listener reconnect notifications may have been missed,
        and on close every waiter must return. Each re-tries its claim (a spurious wake-up is
        allowed)."""
        self._signalled.clear()
        self._epoch += 1
        for events in self._events.values():
            for event in events:
                event.set()

    def waiting(self, agent_id: UUID) -> int:
        """How many waiters ``agent_id`` has now."""
        return len(self._events.get(agent_id, ()))

    def __iter__(self) -> Iterator[UUID]:
        return iter(list(self._events))


async def _poll(waiters: Waiters, interval: float, queued: QueuedCounts) -> None:
    """The one poller of a process, in place of one per waiter.

    A query per waiter per tick made idle long-polls cost a core. Every ``interval`` seconds, if
    anyone waits, it makes one ``queued(agents)`` call for every agent with waiters. It wakes as
    many waiters per agent as it has jobs queued. Jobs this process queues wake their waiters at
    once (``notify``). The poller is for what it cannot hear: other processes on a SQLite file,
    PostgreSQL while LISTEN is down. Runs until cancelled; a failing poll is retried at the next
    tick (the waiters stay waiting).
    """
    while True:
        await asyncio.sleep(interval)
        agents = list(waiters)
        if not agents:
            continue
        try:
            counts = await queued(agents)
        except JobAgentError:
            continue
        waiters.ensure_all(counts)


async def _wait_event(event: asyncio.Event, timeout: float) -> bool:
    """True when ``event`` was set within ``timeout`` seconds."""
    if timeout <= 0:
        return event.is_set()
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
