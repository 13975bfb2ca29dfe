"""Unit-test isolation (``isolated_env`` on every test), the one respx fixture, `mock_api`, and a
`client` on the mocked base URL. ``cli`` (CliRunner) is tests/fixtures/clirun.py's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import respx

from tests.fixtures.wire import API_KEY, BASE, WORKSPACE, WS, page

if TYPE_CHECKING:
    from jobagentctl.client import Client


@pytest.fixture(autouse=True)
def _isolated_env(isolated_env: None) -> None:
    """Every unit test runs without the developer's settings (tests/fixtures/isolation.py)."""


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
