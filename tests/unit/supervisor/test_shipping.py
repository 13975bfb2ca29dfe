"""The shipper: batches, order and streams, the bounded buffer and its marker, the bounded
flush, and the answers that stop it (a server without logs, a lost claim)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from jobagentctl.errors import ClaimLost, LogsUnsupported, ServerUnavailable
from jobagentctl.supervisor import Log
from jobagentctl.supervisor.shipping import Shipper
from tests.fixtures.waiting import wait_for_event, wait_until

from .fakes import FakeClient, claimed_job
from .support import options, run

JOB, CLAIM = uuid.uuid4(), uuid.uuid4()


def shipper(client: FakeClient, **knobs: object) -> tuple[Shipper, list[str], list[str]]:
    said: list[str] = []
    unsupported: list[str] = []
    log = Log(info=said.append, warn=said.append, debug=lambda _: None)
    ship = Shipper(
        client,
        JOB,
        CLAIM,
        log=log,
        on_unsupported=unsupported.append,
        **knobs,  # type: ignore[arg-type]
    )
    ship.start()
    return ship, said, unsupported


def test_chunks_keep_their_streams_in_arrival_order() -> None:
    client = FakeClient()
    ship, said, _ = shipper(client)
    for stream, data in [("stdout", b"one\n"), ("stderr", b"two\n"), ("stdout", b"three\n")]:
        ship.feed(stream, data)
    ship.close()
    assert client.shipped() == [("stdout", b"one\n"), ("stderr", b"two\n"), ("stdout", b"three\n")]
    assert {c.kwargs["claim_id"] for c in client.named("append_logs")} == {CLAIM}
    assert said == []


def test_appends_are_bounded_to_64_kib_while_the_command_runs() -> None:
    client = FakeClient()
    ship, _, _ = shipper(client)
    data = bytes(range(256)) * 1024  # 256 KiB, not UTF-8
    for i in range(0, len(data), 4096):
        ship.feed("stdout", data[i : i + 4096])
    wait_until(lambda: sum(len(raw) for _, raw in client.shipped()) == len(data), what="all sent")
    sizes = [sum(len(c.raw()) for c in chunks) for chunks in client.appended]
    assert max(sizes) <= 64 * 1024 and len(sizes) >= 4
    ship.close()
    assert b"".join(raw for _, raw in client.shipped()) == data


def test_the_final_flush_sends_bigger_appends_of_64_kib_chunks() -> None:
    client = FakeClient()
    # Nothing goes before the end (a batch bigger than the output, a timer that never rings).
    ship, _, _ = shipper(client, batch_seconds=60, batch_bytes=1024 * 1024)
    ship.feed("stdout", b"y" * 1000)
    ship.feed("stderr", b"z" * 300 * 1024)
    ship.close()
    [chunks] = client.appended
    assert [len(c.raw()) for c in chunks] == [1000, 65536, 65536, 65536, 65536, 45056]
    assert [c.stream.value for c in chunks] == ["stdout"] + ["stderr"] * 5


def test_a_down_server_costs_the_oldest_output_and_a_marker_says_how_much() -> None:
    failed = threading.Event()

    def down_once(n: int) -> None:
        if n == 1:
            failed.set()
            raise ServerUnavailable("connection refused")

    client = FakeClient(on_append=down_once)
    ship, _, _ = shipper(client, buffer_bytes=64 * 1024, batch_seconds=0.05)
    ship.feed("stdout", b"x" * 10)
    wait_for_event(failed, what="the first append to fail")
    newest = bytes(range(256)) * 800  # 200 KiB while the server is down
    for i in range(0, len(newest), 8192):
        ship.feed("stderr", newest[i : i + 8192])
    ship.close(timeout=30)
    shipped = client.shipped()
    dropped = 10 + len(newest) - 64 * 1024
    assert shipped[0] == (
        "marker",
        f"[jobagentctl: {dropped} bytes dropped: server unreachable]\n".encode(),
    )
    assert b"".join(raw for _, raw in shipped[1:]) == newest[-64 * 1024 :]
    assert {stream for stream, _ in shipped[1:]} == {"stderr"}
    assert ship.dropped == dropped


def test_the_flush_at_the_end_is_bounded() -> None:
    hang = threading.Event()

    def held(n: int) -> None:
        hang.wait(30)

    client = FakeClient(on_append=held)
    ship, said, _ = shipper(client, batch_seconds=0.01)
    ship.feed("stdout", b"first\n")
    ship.feed("stdout", b"second\n")
    started = time.monotonic()
    ship.close(timeout=0.2)
    assert time.monotonic() - started < 5
    hang.set()
    assert any("not shipped" in line for line in said)


def test_a_server_without_logs_stops_shipping_and_is_told_once() -> None:
    def no_logs(n: int) -> None:
        raise LogsUnsupported("no log endpoint on this server")

    client = FakeClient(on_append=no_logs)
    ship, said, unsupported = shipper(client, batch_seconds=0.01)
    ship.feed("stdout", b"a")
    ship.close(timeout=30)
    ship.feed("stdout", b"b")  # after: ignored
    assert len(unsupported) == 1 and "no log endpoint" in unsupported[0]
    assert len(client.named("append_logs")) == 1
    assert said == []


def test_a_lost_claim_stops_shipping() -> None:
    def lost(n: int) -> None:
        raise ClaimLost("claim lost")

    client = FakeClient(on_append=lost)
    ship, said, unsupported = shipper(client, batch_seconds=0.01)
    ship.feed("stdout", b"a")
    ship.close(timeout=30)
    assert len(client.named("append_logs")) == 1 and unsupported == [] and said == []


def test_run_ships_the_output_and_says_once_when_the_server_has_no_logs(tmp_path: Path) -> None:
    jobs = [claimed_job(), claimed_job()]

    def no_logs(n: int) -> None:
        raise LogsUnsupported("no log endpoint on this server")

    client = FakeClient(jobs=list(jobs), on_append=no_logs)
    opts = options(tmp_path, ["sh", "-c", "echo hello"], loop=True, max_jobs=2, wait=0.0)
    code, logs, records = run(client, opts)
    assert code == 0
    assert [r["status"] for r in records] == ["successful", "successful"]
    assert sum("keeps no job logs" in line for line in logs) == 1
    assert len(client.named("append_logs")) == 1  # the second job ships nothing


def test_no_ship_output_ships_nothing(tmp_path: Path) -> None:
    client = FakeClient(jobs=[claimed_job()])
    code, _, _ = run(client, options(tmp_path, ["sh", "-c", "echo hi"], ship_output=False))
    assert code == 0
    assert client.named("append_logs") == []
