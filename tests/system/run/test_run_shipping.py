"""`run` ships the command's output to the job's log, against a real server on both databases."""

from __future__ import annotations

import base64

from .runs import Harness
from .slow_proxy import slow_proxy


def _log(harness: Harness, job_id: str) -> list[tuple[str, bytes]]:
    """The attempt's log as ``(stream, bytes)``, neighbours of one stream joined (how the
    output was cut into chunks is the shipper's business), read page by page."""
    runs: list[tuple[str, bytes]] = []
    after = 0
    while True:
        path = f"jobs/{job_id}/logs?after={after}&limit=1000"
        status, page = harness.server.request("GET", path)
        assert status == 200, page
        if not page["chunks"]:
            return runs
        for chunk in page["chunks"]:
            data = base64.b64decode(chunk["data"])
            if runs and runs[-1][0] == chunk["stream"]:
                runs[-1] = (chunk["stream"], runs[-1][1] + data)
            else:
                runs.append((chunk["stream"], data))
        after = page["chunks"][-1]["seq"]


def test_output_reaches_the_log_in_order_with_its_streams(own_harness: Harness) -> None:
    job_id = own_harness.enqueue()
    script = (
        "echo out-1; sleep 0.2; echo err-1 >&2; sleep 0.2; printf 'out-2 \\377\\n'; "
        "sleep 0.2; echo err-2 >&2; exit 3"
    )
    run = own_harness.start([], ["sh", "-c", script])
    assert run.wait() == 3, run.stderr()
    assert _log(own_harness, job_id) == [
        ("stdout", b"out-1\n"),
        ("stderr", b"err-1\n"),
        ("stdout", b"out-2 \xff\n"),  # not UTF-8: kept exactly
        ("stderr", b"err-2\n"),
    ]
    # Our own copy is unchanged, and the failure report still carries the tail.
    assert (run.workdir / "stdout").read_bytes() == b"out-1\nout-2 \xff\n"
    assert "err-2" in own_harness.job(job_id)["message"]


def test_no_ship_output_keeps_the_log_empty_and_the_tail(harness: Harness) -> None:
    job_id = harness.enqueue()
    run = harness.start(["--no-ship-output"], ["sh", "-c", "echo secret-ish; exit 1"])
    assert run.wait() == 1, run.stderr()
    assert _log(harness, job_id) == []
    assert "secret-ish" in harness.job(job_id)["message"]


def _appends(method: str, path: str) -> bool:
    return method == "POST" and path.endswith("/logs")


def test_a_slow_log_append_holds_up_no_heartbeat(harness: Harness) -> None:
    job_id = harness.enqueue()
    hold = 2.0  # the first append is answered after 2 s: two heartbeat intervals

    def first_append(method: str, path: str, n: int) -> float:
        return hold if _appends(method, path) and n == 1 else 0.0

    with slow_proxy(harness.server.url, delay=first_append) as proxy:
        script = "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.25; done"
        env = {"JOBAGENTCTL_URL": proxy.url}
        run = harness.start(["--lease-seconds", "3"], ["sh", "-c", script], env=env)
        assert run.wait() == 0, run.stderr()
    start = proxy.times("/logs")[0]
    beats = proxy.times("/heartbeat")
    # Heartbeats went on while the append hung (one queue or pool for both: none would).
    assert [t for t in beats if start < t < start + hold]
    [record] = run.report()
    assert (record["verdict"], record["heartbeatFailures"]) == ("completed", 0)
    assert [a["outcome"] for a in harness.attempts(job_id)] == ["completed"]  # no lease lost
    lines = b"".join(data for _, data in _log(harness, job_id)).decode().split()
    assert lines[-2:] == ["line", "8"]


def test_a_fast_burst_after_a_silence_is_stored_whole(own_harness: Harness) -> None:
    # 4 MiB printed at once after a silence (the shipper idle), under the server's 10 MiB
    # cap, to a server that keeps up: all of it is stored, no marker. (1 MiB was kept of it,
    # paced 64 KiB appends, and a marker blamed the server.)
    job_id = own_harness.enqueue()
    size = 4 * 1024 * 1024
    script = f"echo start; sleep 1.5; head -c {size} /dev/zero | tr '\\0' x"
    run = own_harness.start([], ["sh", "-c", script])
    assert run.wait() == 0, run.stderr()
    log = _log(own_harness, job_id)
    assert [stream for stream, _ in log] == ["stdout"], [s for s, _ in log]
    assert log[0][1] == b"start\n" + b"x" * size
    assert "not shipped" not in run.stderr()


def test_output_kept_while_the_server_is_down_reaches_the_log_whole(harness: Harness) -> None:
    # The first two appends fail (503) while the command prints 3 MiB: it waits (well within
    # the 16 MiB the shipper keeps) and reaches the log whole once the server answers again
    # (the retries take at most 0.75 s of the 5 s flush).
    job_id = harness.enqueue()
    size = 3 * 1024 * 1024

    def down_at_first(method: str, path: str, n: int) -> int | None:
        return 503 if _appends(method, path) and n <= 2 else None

    with slow_proxy(harness.server.url, refuse=down_at_first) as proxy:
        script = f"head -c {size} /dev/zero | tr '\\0' x"
        env = {"JOBAGENTCTL_URL": proxy.url}
        run = harness.start([], ["sh", "-c", script], env=env)
        assert run.wait() == 0, run.stderr()
        assert len(proxy.times("/logs")) > 2  # it was down, then answered
    assert _log(harness, job_id) == [("stdout", b"x" * size)]
