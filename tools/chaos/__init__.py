"""The chaos tooling: real servers, agents in ``run --loop``, seeded faults and the invariants.

``harness`` runs a campaign (``make chaos``), ``soak`` loads one server for minutes,
``db_freeze`` freezes its database, ``watchdog_cost`` measures the watchdog; ``faults``,
``proxy``, ``agents``, ``pgcluster`` and ``invariants`` are their parts. tests/soak/chaos runs short
versions of them in the suite and tests the parts themselves.
"""
