"""Fixtures: ``ctrlplane``, a running stand-in of ctrlplane's API server (see ``standin.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ctrlplane.standin import CtrlplaneStandIn


@pytest.fixture
def ctrlplane(tmp_path: Path) -> Iterator[CtrlplaneStandIn]:
    server = CtrlplaneStandIn(tmp_path / "ctrlplane").start()
    try:
        yield server
    finally:
        server.stop()
