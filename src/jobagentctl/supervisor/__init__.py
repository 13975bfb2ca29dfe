"""The supervisor behind `jobagentctl run -- CMD`: claim, heartbeat, child process, report.

Imports only the standard library and jobagentctl.{models, errors, durations}: never the client.

The phases, each behind a narrow interface (``runner.Supervisor`` strings them together):
``claiming`` (a job, or an ``Outcome``) → ``watching`` (the child's run → ``ChildEnd``, with
``lease``, ``relay``, ``child``/``watchdog``) → ``reporting`` (→ ``Outcome``);
``outcome.exit_code`` alone turns an ``Outcome`` into the exit code. ``waiting`` runs API calls
off the main thread while signals are handled; ``retry`` is the one backoff policy.
"""

from __future__ import annotations

from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.protocol import SupervisorClient
from jobagentctl.supervisor.report_file import JobRecord
from jobagentctl.supervisor.runner import Supervisor

__all__ = ["JobRecord", "Log", "RunOptions", "Supervisor", "SupervisorClient"]
