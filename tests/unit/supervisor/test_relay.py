"""The relays behind `run`'s stdout and stderr, on real pipes."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from jobagentctl.supervisor.output.relay import Relay

DEADLINE = 30.0  # generous: two busy cores


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    try:
        yield read_end, write_end
    finally:
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)


def read_all(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_bytes_arrive_in_order(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    relay = Relay(write_end, limit=1 << 20)
    for i in range(100):
        relay.write(f"{i:03d}\n".encode())
    assert read_all(read_end, 400) == b"".join(f"{i:03d}\n".encode() for i in range(100))
    assert relay.flush(DEADLINE) == 0


def test_a_reader_that_never_reads_bounds_the_buffer_and_never_blocks_the_writer(
    pipe: tuple[int, int],
) -> None:
    _, write_end = pipe
    relay = Relay(write_end, limit=256 * 1024)
    chunk = b"x" * 65536
    started = time.monotonic()
    # Far more than the pipe (64 KiB) and the limit hold: write() never blocks.
    accepted = sum(relay.write(chunk) for _ in range(64))
    assert time.monotonic() - started < DEADLINE
    assert relay.full
    assert accepted * len(chunk) <= 256 * 1024 + 65536 + len(chunk)  # pipe + in flight + limit
    assert relay.dropped == (64 - accepted) * len(chunk)
    # Flushing gives up after its timeout and counts everything that was not written.
    dropped = relay.flush(0.2)
    assert dropped >= relay.dropped > 0


def test_room_is_announced_once_the_reader_catches_up(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    relay = Relay(write_end, limit=128 * 1024)
    while relay.write(b"y" * 65536, drop_when_full=False) and not relay.full:
        pass
    assert relay.full
    room = threading.Event()
    relay.when_room(room.set)
    assert not room.is_set()
    total = 0
    while not room.wait(0):
        total += len(os.read(read_end, 65536))
        assert total < 10 * 1024 * 1024, "room never announced"
    assert not relay.full
    assert relay.flush(0) >= 0


def test_a_closed_reader_stops_the_copy_without_an_error(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    os.close(read_end)
    relay = Relay(write_end)
    relay.write(b"first")
    deadline = time.monotonic() + DEADLINE
    while relay.broken is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(relay.broken, BrokenPipeError)
    assert relay.write(b"second") is False
    assert relay.flush(DEADLINE) == len(b"first") + len(b"second")
