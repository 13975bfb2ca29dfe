"""Issue 11 §5 end to end, short version of ``python -m tools.chaos.db_freeze``: a live server on
a private PostgreSQL frozen 20 s (SIGSTOP). Requests answer 503 within ``database_timeout``,
``/readyz`` says 503, and no heartbeating lease is lost although every lease ran out during the
freeze (the outage grace)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools.chaos.db_freeze import FreezeConfig, run_freeze
from tools.chaos.pgcluster import PgCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REQUESTS = ("heartbeat", "enqueue", "get")


def test_regression_a_frozen_postgres_answers_503_and_loses_no_heartbeating_lease(
    private_pg: PgCluster, tmp_path: Path
) -> None:
    """Issue 11 §5: frozen 10 s, every request hung ~10 s and none got 503, /readyz hung then
    said 200; frozen 30 s, 17 of 20 leases expired although their agents heartbeated."""
    cfg = FreezeConfig(freeze=20, leases=10, lease_seconds=15, database_timeout=2)
    result = run_freeze(cfg, tmp_path, private_pg)
    print(result.report())
    # Started early enough in the freeze to be answered while it lasted: 503, within the bound
    # (generous: two busy cores; the figure in docs/reliability.md is the tight one).
    frozen = [s for kind in REQUESTS for s in result.during(kind, cfg.database_timeout + 3)]
    assert frozen and all(s.status == 503 for s in frozen), result.report()
    assert result.slowest(REQUESTS) < cfg.database_timeout + 10, result.report()
    ready = result.during("readyz", 3)
    assert ready and all(s.status == 503 for s in ready), result.report()
    assert result.slowest(("readyz",)) < 5, result.report()
    assert result.lost == 0, result.report()
