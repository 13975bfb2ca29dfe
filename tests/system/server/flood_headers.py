"""Figure: 8 connections x 50 MB of headers to /healthz, server RSS before/after.

Usage: python -m tests.system.server.flood_headers PORT SERVER_PID [ROUNDS]
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return float("nan")


def flood(port: int, results: list[tuple[int, bytes]]) -> None:
    import socket

    sock = socket.create_connection(("127.0.0.1", port))
    sent = 0
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        chunk = b"a" * (1 << 20)
        for _ in range(50):
            sock.sendall(chunk)
            sent += len(chunk)
        sock.sendall(b"\r\n\r\n")
        sock.settimeout(30)
        answer = sock.recv(200)
    except OSError as exc:
        answer = repr(exc).encode()
    results.append((sent, answer[:60]))
    sock.close()


def main() -> None:
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    print(f"RSS before: {rss_mib(pid):.1f} MB")
    for n in range(rounds):
        results: list[tuple[int, bytes]] = []
        threads = [threading.Thread(target=flood, args=(port, results)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(0.5)
        answers = sorted({answer for _, answer in results})
        sent = [round(s / 2**20) for s, _ in results]
        print(f"round {n}: RSS {rss_mib(pid):.1f} MB; answers {answers}; MB sent {sent}")


if __name__ == "__main__":
    main()
