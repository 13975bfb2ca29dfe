"""Job status arguments: the wire enum, 'all', and the terminal subset `complete` accepts."""

from __future__ import annotations

from jobagentctl.errors import UsageError
from jobagentctl.models import TERMINAL_STATUSES, JobStatus

__all__ = [
    "EVERY_STATUS",
    "filter_choices",
    "status_filter",
    "terminal_choices",
    "terminal_status",
]

# The --status word for "no filter": not a job status (and not ClaimState.ALL, which filters
# claims), so it is spelled here once.
EVERY_STATUS = "all"


def filter_choices(incomplete: str) -> list[str]:
    """What Tab offers for a ``--status`` filter: every status, and ``all``."""
    return [c for c in [*(s.value for s in JobStatus), EVERY_STATUS] if c.startswith(incomplete)]


def terminal_choices(incomplete: str) -> list[str]:
    """What Tab offers for ``complete --status``: the terminal statuses."""
    return sorted(s.value for s in TERMINAL_STATUSES if s.value.startswith(incomplete))


def status_filter(value: str) -> str | None:
    """A status to filter on; ``all`` means no filter."""
    if value == EVERY_STATUS:
        return None
    return _status(value, JobStatus).value


def terminal_status(value: str) -> JobStatus:
    """A terminal status for ``complete``; non-terminal ones have their own commands."""
    status = _status(value, JobStatus)
    if status not in TERMINAL_STATUSES:
        raise UsageError(
            f"--status {value}: not a terminal status (use "
            f"{', '.join(sorted(s.value for s in TERMINAL_STATUSES))}; requeue and cancel "
            "are commands)"
        )
    return status


def _status(value: str, enum: type[JobStatus]) -> JobStatus:
    try:
        return enum(value)
    except ValueError:
        pass
    # Accept any spelling of the camelCase names (inprogress, in_progress, IN-PROGRESS).
    folded = value.replace("_", "").replace("-", "").lower()
    for status in enum:
        if status.value.lower() == folded:
            return status
    raise UsageError(
        f"unknown status {value!r}: use one of {', '.join(s.value for s in enum)}"
    ) from None
