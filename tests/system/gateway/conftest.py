"""Gateway fixtures: the ctrlplane stand-in as the upstream, and gateway servers in front of it.

``ctrlplane`` (``tests/fixtures/ctrlplane.py``) is the stand-in
(``tests/fixtures/ctrlplane_standin.py``: ctrlplane's handlers, a real HTTP server in a thread);
``gateway_factory(**settings)`` starts a real ``jobagentctl server start`` process in
gateway mode on ``database_url`` (both dialects), set up as an operator would: ``server init
--upstream-workspace SLUG --upstream-url URL`` with ctrlplane's key in
``JOBAGENTCTL_SERVER_UPSTREAM_API_KEY``. Its workspace id is ctrlplane's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn
from tests.fixtures.live_server import FAST_SETTINGS, LiveServer, _cli

# Fast gateway settings: polls twice a second, syncs every second, and short upstream
# timeouts (so an outbox row a dead process held is taken again within 5 s).
GATEWAY_SETTINGS: dict[str, Any] = {
    **FAST_SETTINGS,
    "upstream_poll_interval": 0.5,
    "upstream_sync_interval": 1.0,
    "upstream_timeout": 2.0,
    "upstream_max_backoff": 1.0,
}


class GatewayServer(LiveServer):
    """A gateway process; ``upstream`` is the stand-in it fronts."""

    upstream: CtrlplaneStandIn

    def init(self) -> None:
        env = {**self.base_env(), "JOBAGENTCTL_SERVER_UPSTREAM_API_KEY": self.upstream.api_key}
        data = _cli(
            [
                "server",
                "init",
                "-o",
                "json",
                "--database",
                self.database_url,
                "--upstream-url",
                self.upstream_url,
                "--upstream-workspace",
                self.upstream.workspace_slug,
            ],
            env,
        )
        self.workspace_id = data["workspaceId"]
        self.api_key = data["apiKey"]

    def start(self) -> GatewayServer:
        super().start()
        return self

    @property
    def upstream_url(self) -> str:
        return f"http://127.0.0.1:{self.upstream.port}"

    def agent_env(self, agent_id: str) -> dict[str, str]:
        """The environment of an agent's CLI against the gateway (the workspace key)."""
        return {**self.base_env(), **self.env(), "JOBAGENTCTL_AGENT": agent_id}


class GatewayFactory:
    def __init__(self, database_url: str, tmp_path: Path, upstream: CtrlplaneStandIn) -> None:
        self.database_url = database_url
        self.tmp_path = tmp_path
        self.upstream = upstream
        self.servers: list[LiveServer] = []

    def __call__(self, *, init: bool = True, **settings: Any) -> GatewayServer:
        merged = {
            **GATEWAY_SETTINGS,
            "upstream_url": f"http://127.0.0.1:{self.upstream.port}",
            "upstream_api_key": self.upstream.api_key,
            **settings,
        }
        server = GatewayServer(
            self.database_url,
            self.tmp_path / f"gateway{len(self.servers)}",
            merged,
            registry=self.servers,
        )
        server.upstream = self.upstream
        if init:
            server.init()
        return server

    def close(self) -> None:
        for server in reversed(self.servers):
            try:
                server.stop(timeout=15)
            finally:
                server.kill()


@pytest.fixture
def gateway_factory(
    database_url: str, tmp_path: Path, ctrlplane: CtrlplaneStandIn
) -> Iterator[GatewayFactory]:
    factory = GatewayFactory(database_url, tmp_path, ctrlplane)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def gateway(gateway_factory: GatewayFactory) -> GatewayServer:
    return gateway_factory().start()
