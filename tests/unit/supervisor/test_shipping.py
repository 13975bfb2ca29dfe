"""The shipper: batches, order and streams, the bounded buffer and its marker, the bounded
flush, and the answers that stop it (a server without logs, a lost claim)."""

from __future__ import annotations

import threading
import time
import uuid

from jobagentctl.errors import ClaimLost, LogsUnsupported, PayloadTooLarge, ServerUnavailable
from jobagentctl.models import LogAppendResult
from jobagentctl.supervisor import Log
from jobagentctl.supervisor.output.shipping import ShipLimits, Shipper
from tests.fixtures.fake_client import FakeClient
from tests.fixtures.waiting import wait_for_event, wait_until

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
        limits=ShipLimits(**knobs),  # type: ignore[arg-type]
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


def test_a_backlog_goes_in_bigger_appends_of_64_kib_chunks() -> None:
    # The first append hangs until the whole burst is fed: a backlog builds up behind it.
    fed = threading.Event()
    client = FakeClient(on_append=lambda n: n == 1 and fed.wait(30) and None)
    ship, said, _ = shipper(client)
    data = bytes(range(256)) * 8 * 1024  # 2 MiB, not UTF-8
    for i in range(0, len(data), 4096):
        ship.feed("stdout", data[i : i + 4096])
    fed.set()
    wait_until(lambda: sum(len(raw) for _, raw in client.shipped()) == len(data), what="all sent")
    ship.close()
    sizes = [sum(len(c.raw()) for c in chunks) for chunks in client.appended]
    # Behind, the shipper sends what waits in appends of up to 512 KiB (not one 64 KiB chunk
    # a time): the first append, then four full ones at most.
    assert max(sizes) == 512 * 1024 and len(sizes) <= 6, sizes
    assert max(len(c.raw()) for chunks in client.appended for c in chunks) <= 64 * 1024
    assert b"".join(raw for _, raw in client.shipped()) == data
    assert ship.dropped == 0 and said == []


def test_a_fast_burst_is_shipped_whole_when_the_server_keeps_up() -> None:
    # A server that takes 20 ms an append, and a command that prints 8 MiB at once.
    client = FakeClient(on_append=lambda n: time.sleep(0.02))
    ship, said, _ = shipper(client)
    data = b"".join(b"%07d\n" % i for i in range(1024 * 1024))  # 8 MiB
    for i in range(0, len(data), 65536):
        ship.feed("stdout", data[i : i + 65536])
    ship.close(timeout=60)
    assert [stream for stream, _ in client.shipped() if stream == "marker"] == []
    assert b"".join(raw for _, raw in client.shipped()) == data
    assert ship.dropped == 0 and said == []


def test_a_marker_blames_the_command_when_the_server_kept_up() -> None:
    # The server answers (slowly: the first append hangs) while the command overflows the
    # buffer: the cause is the command's pace, not an unreachable server.
    fed = threading.Event()
    client = FakeClient(on_append=lambda n: n == 1 and fed.wait(30) and None)
    ship, _, _ = shipper(client, buffer_bytes=256 * 1024)
    first = b"a" * 65536
    ship.feed("stdout", first)
    wait_until(lambda: client.named("append_logs"), what="the first append")
    ship.feed("stdout", b"b" * 1024 * 1024)
    fed.set()
    ship.close(timeout=30)
    shipped = client.shipped()
    dropped = 1024 * 1024 - 256 * 1024
    assert shipped[0] == ("stdout", first)
    assert shipped[1] == (
        "marker",
        f"[jobagentctl: {dropped} bytes dropped: the command printed faster than shipping "
        "could send]\n".encode(),
    )
    assert b"".join(raw for _, raw in shipped[2:]) == b"b" * 256 * 1024


def test_a_server_with_a_smaller_body_limit_gets_smaller_appends() -> None:
    def limit(n: int) -> None:
        chunks = client.named("append_logs")[-1].kwargs["chunks"]
        if sum(len(c.raw()) for c in chunks) > 100 * 1024:
            raise PayloadTooLarge("request body exceeds 140000 bytes")

    client = FakeClient(on_append=limit)
    ship, said, _ = shipper(client, batch_seconds=60, batch_bytes=1024 * 1024)
    data = bytes(range(256)) * 2048  # 512 KiB
    ship.feed("stdout", data)
    ship.close(timeout=30)
    assert b"".join(raw for _, raw in client.shipped()) == data
    assert ship.dropped == 0 and said == []


def test_once_the_server_cap_cuts_the_log_only_what_it_keeps_waits() -> None:
    # The server says its cap cut the log (stored 400 KiB): what waits beyond a quarter of
    # that is the middle the cap cuts anyway, dropped here and marked as such.
    fed = threading.Event()

    def hold_second(n: int) -> None:
        if n == 2:
            fed.wait(30)

    client = FakeClient(
        on_append=hold_second,
        append_answer=lambda n: LogAppendResult(
            job_id=JOB, attempt=1, next_seq=n + 1, stored_bytes=400 * 1024, truncated=True
        ),
    )
    ship, said, _ = shipper(client, append_bytes=64 * 1024)
    ship.feed("stdout", b"a" * 65536)
    wait_until(lambda: len(client.appended) == 1, what="the first append answered")
    ship.feed("stdout", b"b" * 65536)
    wait_until(lambda: len(client.named("append_logs")) == 2, what="the second append")
    ship.feed("stdout", b"c" * 1024 * 1024)
    fed.set()
    ship.close(timeout=30)
    markers = [raw.decode() for stream, raw in client.shipped() if stream == "marker"]
    assert markers == [
        f"[jobagentctl: {1024 * 1024 - 100 * 1024} bytes dropped in all: past the server's "
        "log cap, which keeps the head and the newest]\n"
    ]
    assert client.shipped()[-1][1].endswith(b"c") and said == []


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


def test_a_flush_cut_short_counts_every_byte_the_log_will_not_have() -> None:
    # The first append hangs past the flush; meanwhile the buffer overflowed: the dropped
    # bytes whose marker never went out count too.
    hang = threading.Event()
    client = FakeClient(on_append=lambda n: hang.wait(30) and None)
    ship, said, _ = shipper(client, buffer_bytes=64 * 1024, batch_seconds=0.01)
    ship.feed("stdout", b"x" * 10)
    wait_until(lambda: client.named("append_logs"), what="the first append")
    for _ in range(25):
        ship.feed("stdout", b"y" * 8192)  # 200 KiB, 136 KiB over the buffer
    ship.close(timeout=0.2)
    hang.set()
    assert said == [
        f"{10 + 200 * 1024} bytes of output not shipped to the job's log within 0.2s of the "
        "command's end (the server had not taken it all by then)"
    ]


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


def test_a_refused_append_stops_shipping_and_says_once_what_was_not_shipped() -> None:

    def refused_after_first(n: int) -> None:
        if n > 1:
            raise ClaimLost("the claim was released by an operator")

    client = FakeClient(on_append=refused_after_first)
    ship, said, unsupported = shipper(client, batch_seconds=0.01)
    ship.feed("stdout", b"work 1\n")
    wait_until(lambda: client.appended, what="the first append")
    ship.feed("stdout", b"work 2\n")
    wait_until(lambda: len(client.named("append_logs")) == 2, what="the refused append")
    ship.feed("stderr", b"cleanup 1\n")  # after the refusal: counted, not sent
    ship.feed("stderr", b"cleanup 2\n")
    ship.close(timeout=30)
    assert len(client.named("append_logs")) == 2 and unsupported == []
    assert client.shipped() == [("stdout", b"work 1\n")]
    assert said == [
        "27 bytes of output not shipped to the job's log: the server refused them "
        "(the claim was released by an operator)"
    ]
    assert ship.refused_bytes == 27
