"""Fixtures of the server tests. The in-process app (``api``, :class:`Api`, ``make_api``,
``open_api``) is shared with the security tests and lives in tests/fixtures/server_app.py;
it is re-exported here for the test modules that import it from this file.
"""

from __future__ import annotations

from tests.fixtures.live_server import LiveServer
from tests.fixtures.server_app import TEST_SETTINGS, Api, make_api, open_api

__all__ = ["TEST_SETTINGS", "Api", "make_api", "open_api", "server_metrics"]


def server_metrics(server: LiveServer) -> str:
    status, text = server.request("GET", "/metrics", api_key=None)
    return str(text) if status == 200 else ""
