"""Fixtures for the `run` end-to-end tests.

Starting a server costs seconds on a busy machine, so tests that leave the server alone share
one SQLite server per module (each test gets its own agent, hence its own queue); tests that
stop, restart or must run on PostgreSQL too get a server of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.live_server import LiveServer

from .runs import Harness


@pytest.fixture
def harness(shared_server: LiveServer, tmp_path: Path) -> Iterator[Harness]:
    """A fresh agent on the module's shared SQLite server; its runs are killed afterwards."""
    with contextlib.closing(Harness(shared_server, tmp_path)) as h:
        yield h


@pytest.fixture
def own_harness(live_server: LiveServer, tmp_path: Path) -> Iterator[Harness]:
    """A server of this test's own (parametrized over SQLite and PostgreSQL) and an agent."""
    with contextlib.closing(Harness(live_server, tmp_path)) as h:
        yield h
