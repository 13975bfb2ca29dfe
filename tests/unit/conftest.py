"""Unit-test isolation (no real config file, no inherited JOBAGENTCTL_*/CTRLPLANE_* variables),
the one respx fixture, `mock_api`, and a `client` on the mocked base URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import respx

from .clirun import Cli
from .wire import API_KEY, BASE, WORKSPACE, WS, page

if TYPE_CHECKING:
    from jobagentctl.client import Client


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    import os

    for name in list(os.environ):
        if name.startswith(("JOBAGENTCTL_", "CTRLPLANE_")) or name in ("NO_COLOR", "COLUMNS"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    # Wide enough that Rich tables keep full ids on one line.
    monkeypatch.setenv("COLUMNS", "250")
    yield


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(monkeypatch)


@pytest.fixture
def mock_api(request: pytest.FixtureRequest) -> Iterator[respx.MockRouter]:
    """The respx router the unit tests mock the API with (one fixture for every module).

    Routes need not all be called, unless the module sets ``RESPX_ASSERT_ALL_CALLED = True``.
    Routes are absolute URLs (``wire.WS``…): respx would not narrow those by a ``base_url``."""
    strict = bool(getattr(request.module, "RESPX_ASSERT_ALL_CALLED", False))
    with respx.mock(assert_all_called=strict) as router:
        if not strict:
            # A list table on a terminal names its agents (one read of the agents): none by
            # default; a test that mocks this route itself replaces this one.
            router.get(f"{WS}/job-agents").respond(200, json=page([]))
        yield router


@pytest.fixture
def client() -> Iterator[Client]:
    """A ``Client`` of workspace ``wire.WORKSPACE`` at ``wire.BASE`` (mock it with ``mock_api``)."""
    from jobagentctl.client import Client, ConnectionOptions

    with Client(f"{BASE}/api/", API_KEY, WORKSPACE, ConnectionOptions(timeout=5.0)) as c:
        yield c
