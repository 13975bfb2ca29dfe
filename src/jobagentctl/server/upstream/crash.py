"""Crash points for the gateway's crash tests: ``JOBAGENTCTL_SERVER_GATEWAY_CRASH_AT=STEP``
makes the process exit at once (``os._exit``, as a SIGKILL would: nothing flushed, no
shutdown) when it reaches ``STEP``. Test-only; unset in production, where it costs one lookup.

Steps:

- ``claimed-locally``: the lease recorded here, the claim not yet sent to ctrlplane;
- ``claimed-upstream``: ctrlplane answered the claim, the agent not yet;
- ``report-accepted``: the report in the outbox, not yet sent;
- ``report-delivered``: ctrlplane took it, the attempt not yet ended here;
- ``requeue-recorded``: the attempt ended expired and the requeue is in the outbox, not yet sent;
- ``requeue-delivered``: ctrlplane took it, the outbox row not yet marked done.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CRASH_ENV", "crash_point"]

CRASH_ENV = "JOBAGENTCTL_SERVER_GATEWAY_CRASH_AT"


def crash_point(step: str) -> None:
    """Exit the process now if the crash is set for ``step``."""
    if os.environ.get(CRASH_ENV) == step:
        sys.stderr.write(f"gateway: crash injected at {step}\n")
        sys.stderr.flush()
        os._exit(137)
