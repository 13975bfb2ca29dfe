"""The skeleton the threads that keep a lease share: a daemon thread that looks after one claim.

The heartbeat (:mod:`.heartbeat`) and the claim long-poll (:mod:`.claimwatch`) each loop on
their own request until stopped or until they learn that the claim is gone. They never act on
it: they post one :class:`~.lease.LeaseNews` to the main loop, which decides.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import ClassVar
from uuid import UUID

from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.lease.job_lease import Beat, LeaseNews
from jobagentctl.supervisor.protocol import SupervisorClient

__all__ = ["ClaimThread"]


@dataclass(eq=False)
class ClaimThread:
    """A daemon thread running :meth:`_run` for the claim ``claim_id`` of ``job_id``.

    The stop event is also what the loop sleeps on, so :meth:`stop` ends a wait at once; a
    request in flight is not interrupted. Subclasses add their fields and write :meth:`_run`
    (and :meth:`_done`, to clean up when the thread ends).
    """

    #: Names the thread (with the job's id), for a debugger or a stack dump.
    kind: ClassVar[str] = "claim"

    client: SupervisorClient
    job_id: UUID
    claim_id: UUID
    _: KW_ONLY
    post: Callable[[object], None]
    log: Log
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread = field(init=False, repr=False)

    def __post_init__(self) -> None:
        name = f"{self.kind}-{self.job_id}"
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout: float | None = 0) -> None:
        """Stop after the request in flight, if any, waiting up to ``timeout`` for the thread
        to end (default: not at all; None: as long as it takes)."""
        self._stop.set()
        if self._thread.is_alive() and timeout != 0:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        """Whether the thread is still alive."""
        return self._thread.is_alive()

    def _main(self) -> None:
        try:
            self._run()
        finally:
            self._done()

    def _run(self) -> None:
        raise NotImplementedError

    def _done(self) -> None:
        """Called on the thread as it ends."""

    def _verdict(self, beat: Beat, why: str) -> Beat:
        """The claim is gone: end the loop and post the news, once, and only while running. After
        :meth:`stop` the job is over and nobody is listening."""
        if not self._stop.is_set():
            self._stop.set()
            self.post(LeaseNews(self.job_id, beat, why))
        return beat
