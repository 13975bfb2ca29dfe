"""Load held, short version: ~30 s of steady claims and heartbeats on PostgreSQL; no lease
heartbeated in time may be lost (``python -m tools.chaos.soak`` is the long one).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tools.chaos.pgcluster import PgCluster
from tools.chaos.soak import SoakConfig, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_leases_heartbeated_in_time_survive_steady_load(
    private_pg: PgCluster, tmp_path: Path
) -> None:
    cfg = SoakConfig(seconds=30, leases=120, lease_seconds=6, hold=(4.0, 16.0), window=10)
    name = f"soak_{uuid.uuid4().hex[:8]}"
    url = private_pg.create_database(name)
    try:
        result = run_soak(cfg, database_url=url, workdir=tmp_path)
    finally:
        private_pg.drop_database(name)
    print(result.table())
    print(result.summary())
    assert not result.lost, result.lost[:10]
    assert result.attempt_outcomes.get("expired", 0) == 0, result.summary()
    assert result.reaped == 0, result.summary()
    assert result.completed > 100, result.summary()
    assert result.attempt_outcomes.get("open", 0) == 0, result.summary()
    # Generous on purpose (two shared cores): a p99 near the heartbeat interval would
    # threaten leases; milliseconds are expected.
    assert result.worst_p99("heartbeat") < cfg.lease_seconds / 3, result.table()
