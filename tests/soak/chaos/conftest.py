"""Fixtures of the chaos suite: one private PostgreSQL cluster for the whole session.

The chaos runs restart PostgreSQL and the soak loads it hard; neither may touch the shared
server on 5432 that the other suites use at the same time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from tools.chaos.pgcluster import PgCluster, PgClusterUnavailable


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PgCluster]:
    """A started private cluster (skipped with the reason when this machine cannot run one,
    failed instead when ``JOBAGENTCTL_REQUIRE_POSTGRES=1``)."""
    try:
        cluster = PgCluster().start()
    except PgClusterUnavailable as exc:
        reason = f"no private PostgreSQL cluster for the chaos suite: {exc}"
        if os.environ.get("JOBAGENTCTL_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{reason} and JOBAGENTCTL_REQUIRE_POSTGRES=1", pytrace=False)
        pytest.skip(reason)
    try:
        yield cluster
    finally:
        cluster.stop()
