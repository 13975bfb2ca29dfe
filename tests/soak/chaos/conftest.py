"""Fixtures of the chaos suite: one private PostgreSQL cluster for the whole session.

The chaos runs restart PostgreSQL and the soak loads it hard; neither may touch the shared
server on 5432 that the other suites use at the same time.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tools.chaos.pgcluster import PgCluster

from tests.fixtures.databases import private_cluster


@pytest.fixture(scope="session")
def private_pg() -> Iterator[PgCluster]:
    """A started private cluster (skipped with the reason when this machine cannot run one,
    failed instead when ``JOBAGENTCTL_REQUIRE_POSTGRES=1``)."""
    cluster = private_cluster("no private PostgreSQL cluster for the chaos suite")
    try:
        yield cluster
    finally:
        cluster.stop()
