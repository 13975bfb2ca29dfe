"""jobagentctl: pull-based job agents with leases, heartbeats, a reaper and fencing.

Imports nothing heavy: `jobagentctl --version` must start fast.
"""

__version__ = "0.4.0"
__all__ = ["__version__"]
