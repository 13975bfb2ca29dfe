"""An agent's heartbeats keep their connection, and a connection made anew resumes TLS.

Against a real ``server start`` (SQLite: no database is involved in what they exercise) with
the real client. The server's idle timeout is 5 s for a connection that has carried no valid
key; an agent heartbeats every lease/3. The wait between two heartbeats is not a sleep: it ends
when the server closes an unkeyed connection opened after the first heartbeat for idleness, so
the first one's connection has been idle at least as long. Connections and handshakes are
counted at the server (``/metrics``).
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from jobagentctl.client import Client, ConnectionOptions
from tests.fixtures.live_server import LiveServer, LiveServerFactory
from tests.fixtures.tls import TlsFiles, client_context, make_tls_files


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path / "tls")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[LiveServerFactory]:
    with LiveServerFactory(f"sqlite:///{tmp_path / 'keepalive.db'}", tmp_path) as factory:
        yield factory


def _metrics(server: LiveServer, *names: str) -> list[float]:
    """Samples of one ``/metrics`` read (a connection of its own, and over TLS a full
    handshake: urllib closes it)."""
    status, text = server.request("GET", "/metrics", api_key=None)
    assert status == 200
    values = []
    for name in names:
        found = re.search(rf"^{re.escape(name)} (\S+)$", str(text), re.MULTILINE)
        assert found is not None, name
        values.append(float(found.group(1)))
    return values


CONNECTIONS = "jobagentctl_connections_accepted"
FULL = 'jobagentctl_tls_handshakes{resumed="no"}'
RESUMED = 'jobagentctl_tls_handshakes{resumed="yes"}'


def _idle_timeout_passed(server: LiveServer, tls: TlsFiles | None) -> None:
    """Return once the server has closed an unkeyed connection, opened now, for idleness."""
    sock: socket.socket = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    if tls is not None:
        sock = client_context(tls.ca).wrap_socket(sock, server_hostname="127.0.0.1")
    with sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, ssl.SSLEOFError, ssl.SSLZeroReturnError):
            pass
        assert received.startswith(b"HTTP/1.1 200 "), received[:100]


def _claimed(server: LiveServer, client: Client) -> tuple[UUID, UUID]:
    agent = server.create_agent("heartbeating")
    server.enqueue(agent, config={})
    claimed = client.claim_next(UUID(agent), lease_seconds=120, wait_seconds=0)
    assert claimed.claim_id is not None
    return claimed.id, claimed.claim_id


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_two_heartbeats_past_the_idle_timeout_share_one_connection(
    servers: LiveServerFactory, tls: TlsFiles, scheme: str
) -> None:
    """A keyed connection outlives the 5 s idle timeout: the second heartbeat, sent after an
    unkeyed connection was closed for idleness, is no new connection (nor handshake)."""
    files = tls if scheme == "https" else None
    server = servers(
        ca_bundle=None if files is None else files.ca,
        **({} if files is None else files.settings()),
        keep_alive_timeout=5,
    )
    with Client(
        server.url,
        server.api_key,
        server.workspace_id,
        ConnectionOptions(ca_bundle=server.ca_bundle),
    ) as client:
        job_id, claim_id = _claimed(server, client)
        client.heartbeat(job_id, claim_id=claim_id)
        _idle_timeout_passed(server, files)
        [before] = _metrics(server, CONNECTIONS)
        client.heartbeat(job_id, claim_id=claim_id)
        [after] = _metrics(server, CONNECTIONS)
    # One: the second /metrics read's own connection.
    assert after - before == 1, "the second heartbeat needed a new connection"


def test_a_connection_made_anew_resumes_the_tls_session(
    servers: LiveServerFactory, tls: TlsFiles
) -> None:
    """The server closes the agent's idle connection (keyed timeout 1 s here); the next
    heartbeat's handshake resumes the session instead of a full handshake."""
    server = servers(
        ca_bundle=tls.ca, **tls.settings(), keep_alive_timeout=1, keyed_keep_alive_timeout=1
    )
    with Client(
        server.url, server.api_key, server.workspace_id, ConnectionOptions(ca_bundle=tls.ca)
    ) as client:
        job_id, claim_id = _claimed(server, client)
        client.heartbeat(job_id, claim_id=claim_id)
        _idle_timeout_passed(server, tls)
        full, resumed = _metrics(server, FULL, RESUMED)
        client.heartbeat(job_id, claim_id=claim_id)
        # The second /metrics read's own handshake is a full one (urllib keeps no session).
        assert _metrics(server, FULL, RESUMED) == [full + 1, resumed + 1]


def _resident_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1])


def test_a_kept_tls_connection_costs_the_server_little_memory(
    servers: LiveServerFactory, tls: TlsFiles
) -> None:
    """A fleet keeps its TLS connections open: each one must not hold a read buffer of its own
    (asyncio's TLS layer gives each a zero-filled 256 KiB one: 2.5 GiB for 10,000 agents)."""
    server = servers(ca_bundle=tls.ca, **tls.settings(), keep_alive_timeout=300)
    assert server.proc is not None
    context = client_context(tls.ca)
    count = 200
    opened: list[ssl.SSLSocket] = []
    try:
        # One connection first: what the first TLS connection loads is not a per-connection cost.
        for _ in range(count + 1):
            sock = context.wrap_socket(
                socket.create_connection(("127.0.0.1", server.port), timeout=60),
                server_hostname="127.0.0.1",
            )
            opened.append(sock)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            if len(opened) == 1:
                before = _resident_kib(server.proc.pid)
        per_connection = (_resident_kib(server.proc.pid) - before) / count
    finally:
        for sock in opened:
            sock.close()
    assert per_connection < 128, f"{per_connection:.0f} KiB per kept TLS connection"
