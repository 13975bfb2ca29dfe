"""The fault proxy: it forwards HTTP/1.1 faithfully, injects exactly the fault it is told to,
and its record says what the server saw even when the client never heard back."""

from __future__ import annotations

import http.client
import json
import random
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tools.chaos.proxy import Exchange, FaultProxy, ProxyFault

from tests.fixtures.live_server import free_port
from tests.fixtures.waiting import wait_until


class _Upstream:
    """A tiny keep-alive JSON server that remembers every request body it received."""

    def __init__(self, name: str) -> None:
        self.seen: list[dict[str, object]] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_PUT(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                seen.append(body)
                payload = json.dumps({"upstream": name, "echo": body}).encode()
                self.send_response(202)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                del format, args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream("a")
    yield server
    server.close()


@pytest.fixture
def make_proxy() -> Iterator[Callable[..., FaultProxy]]:
    started: list[FaultProxy] = []

    def make(upstreams: list[int], *, slots: int = 1, seed: int = 7) -> FaultProxy:
        proxy = FaultProxy(
            [("127.0.0.1", port) for port in upstreams], slots, rng=random.Random(seed)
        )
        started.append(proxy.start())
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


def put(
    port: int, body: dict[str, object], *, timeout: float = 10.0
) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(
            "PUT",
            "/api/v1/thing",
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_forwards_keep_alive_requests_and_records_them(
    upstream: _Upstream, make_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = make_proxy([upstream.port])
    conn = http.client.HTTPConnection("127.0.0.1", proxy.ports[0], timeout=10)
    for n in range(3):
        conn.request("PUT", "/x", body=json.dumps({"claimId": f"c{n}"}))
        response = conn.getresponse()
        assert response.status == 202
        assert json.loads(response.read())["echo"] == {"claimId": f"c{n}"}
    conn.close()
    wait_until(
        lambda: len(proxy.exchanges) == 3 and all(e.delivered for e in proxy.exchanges),
        what="the three exchanges recorded as delivered",
    )
    first: Exchange = proxy.exchanges[0]
    assert (first.method, first.path, first.status, first.claim_id) == ("PUT", "/x", 202, "c0")
    assert first.t_recv <= (first.t_fwd or 0) <= (first.t_resp or 0)
    assert first.fault is None and upstream.seen == [{"claimId": f"c{n}"} for n in range(3)]


def test_a_drop_never_reaches_the_server(
    upstream: _Upstream, make_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = make_proxy([upstream.port])
    proxy.fault = ProxyFault("drop", 1.0, "hit:proxy_drop")
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        put(proxy.ports[0], {"n": 1})
    assert upstream.seen == []
    assert proxy.exchanges[0].fault == "drop" and not proxy.exchanges[0].forwarded
    assert proxy.applied["hit:proxy_drop"] == 1
    proxy.fault = None
    assert put(proxy.ports[0], {"n": 2})[0] == 202


def test_a_reset_after_the_answer_hides_a_write_the_server_made(
    upstream: _Upstream, make_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = make_proxy([upstream.port])
    proxy.fault = ProxyFault("reset", 1.0, "hit:proxy_reset")
    kinds = set()
    for n in range(12):
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            put(proxy.ports[0], {"n": n})
        kinds.add(proxy.exchanges[-1].fault)
    assert kinds == {"reset_before", "reset_after"}
    after = [e for e in proxy.exchanges if e.fault == "reset_after"]
    before = [e for e in proxy.exchanges if e.fault == "reset_before"]
    # The server acted on every reset_after request; the client heard nothing of it.
    assert all(e.status == 202 and not e.delivered for e in after)
    assert all(not e.forwarded for e in before)
    assert sorted(int(str(b["n"])) for b in upstream.seen) == sorted(
        int(str((e.request or {})["n"])) for e in after
    )


def test_a_delayed_request_is_delivered_after_the_client_gave_up(
    upstream: _Upstream, make_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = make_proxy([upstream.port], seed=1)
    # The delay falls on the request or on the response, at random: retry until a request is held.
    proxy.fault = ProxyFault("delay", 1.0, "hit:proxy_delay_long", delay=(0.8, 0.8))
    for n in range(12):
        with pytest.raises(TimeoutError):
            put(proxy.ports[0], {"n": n}, timeout=0.3)
        if (proxy.exchanges[-1].fault or "").startswith("delay_request"):
            break
    late = proxy.exchanges[-1]
    assert (late.fault or "").startswith("delay_request")
    wait_until(lambda: late.status == 202, what="the held request answered by the server")
    assert late.t_fwd is not None and late.t_fwd - late.t_recv >= 0.75
    assert {"n": n} in upstream.seen


def test_slots_are_targeted_one_by_one(
    upstream: _Upstream, make_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = make_proxy([upstream.port], slots=2)
    proxy.fault = ProxyFault("drop", 1.0, "hit:proxy_drop", slots=frozenset({1}))
    assert put(proxy.ports[0], {"slot": 0})[0] == 202
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        put(proxy.ports[1], {"slot": 1})
    assert [e.slot for e in proxy.exchanges] == [0, 1]


def test_fails_over_to_another_replica_and_resets_when_none_is_up(
    make_proxy: Callable[..., FaultProxy],
) -> None:
    b = _Upstream("b")
    dead = free_port()
    try:
        proxy = make_proxy([dead, b.port], slots=1)
        status, body = put(proxy.ports[0], {"n": 1})
        assert (status, body["upstream"]) == (202, "b") and proxy.exchanges[0].upstream == 1
    finally:
        b.close()
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        put(proxy.ports[0], {"n": 2})
    assert "no_upstream" in (proxy.exchanges[-1].fault or "")
