"""Fixtures of the security tests: the app in-process on a real store (both databases), reusing
the server tests' ``make_api`` so the two suites build the app the same way."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.server.conftest import Api, make_api


@pytest.fixture
async def api(database_url: str, anyio_backend: str) -> AsyncIterator[Api]:
    async for value in make_api(database_url):
        yield value
