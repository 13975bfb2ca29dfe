"""The command reads `run`'s stdin (docs/run.md "Stdin"): passed through, shared by the jobs of
a `--loop`, and a terminal stays readable although the command has no controlling terminal.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import termios
import time
from pathlib import Path
from typing import IO, Any

import pytest

from tests.fixtures.cli import cli_command

from .runs import DEADLINE, Harness


def _run(
    harness: Harness,
    args: list[str],
    command: list[str],
    *,
    stdin: int | IO[Any] | None,
    name: str = "run",
    terminal: bool = False,
) -> subprocess.Popen[bytes]:
    """``jobagentctl run ARGS -- COMMAND``; ``terminal``: in a session of its own whose
    controlling terminal is ``stdin`` (a pty), as when typed at a shell prompt."""
    workdir = harness.tmp_path / name
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**harness.server.base_env(), **harness.server.env()}
    env.update({"JOBAGENTCTL_AGENT": harness.agent_id, "TMPDIR": str(workdir)})
    argv = [*cli_command("run", *args), "--", *command]
    return subprocess.Popen(
        argv,
        env=env,
        cwd=workdir,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=terminal,
        # After setsid: the pty on stdin becomes run's controlling terminal.
        preexec_fn=(lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0)) if terminal else None,
    )


def test_piped_stdin_reaches_the_command(harness: Harness) -> None:
    """`printf data | jobagentctl run -- cat`: the data comes out, the job is successful."""
    job = harness.enqueue()
    proc = _run(harness, [], ["cat"], stdin=subprocess.PIPE)
    out, err = proc.communicate(b"data\x00\xffline\n", timeout=DEADLINE)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert out == b"data\x00\xffline\n"
    assert harness.job(job)["status"] == "successful"


def test_the_jobs_of_a_loop_share_stdin(harness: Harness) -> None:
    """Each job reads on where the last one stopped; one that reads to the end leaves the
    next nothing (EOF at once)."""
    jobs = [harness.enqueue() for _ in range(3)]
    script = 'read -r line || line="(eof)"; echo "$line"; [ "$line" != two ] || cat >/dev/null'
    proc = _run(harness, ["--loop", "--max-jobs", "3"], ["sh", "-c", script], stdin=subprocess.PIPE)
    out, err = proc.communicate(b"one\ntwo\nthree\nfour\n", timeout=DEADLINE)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert out.decode().splitlines() == ["one", "two", "(eof)"]
    assert [harness.job(j)["status"] for j in jobs] == ["successful"] * 3


def _read_until(fd: int, needle: bytes, timeout: float = DEADLINE) -> bytes:
    got = b""
    end = time.monotonic() + timeout
    while needle not in got:
        left = end - time.monotonic()
        assert left > 0, f"{needle!r} not seen; got {got!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            got += chunk
    return got


@pytest.mark.skipif(not Path("/dev/ptmx").exists(), reason="needs a pseudo-terminal")
def test_a_terminal_on_stdin_is_readable_but_not_the_commands_controlling_terminal(
    harness: Harness,
) -> None:
    """`run` typed at a terminal: the command (in a session of its own) reads what is typed
    from its stdin, which is a tty; but it has no controlling terminal: /dev/tty cannot be
    opened (a program that prompts there, as ssh or sudo do, fails)."""
    job = harness.enqueue()
    script = (
        '[ -t 0 ] && echo "stdin is a tty"; '
        "if (: </dev/tty) 2>/dev/null; then echo 'has /dev/tty'; else echo 'no /dev/tty'; fi; "
        'echo ready; read -r line; echo "got: $line"'
    )
    master, slave = pty.openpty()
    try:
        proc = _run(harness, [], ["sh", "-c", script], stdin=slave, terminal=True)
        os.close(slave)
        assert proc.stdout is not None
        out = _read_until(proc.stdout.fileno(), b"ready\n")
        os.write(master, b"typed\n")
        out += _read_until(proc.stdout.fileno(), b"got: typed\n")
        assert proc.wait(DEADLINE) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        os.close(master)
    text = out.decode()
    assert "stdin is a tty" in text
    assert "no /dev/tty" in text
    assert harness.job(job)["status"] == "successful"


@pytest.mark.skipif(not Path("/dev/ptmx").exists(), reason="needs a pseudo-terminal")
def test_ctrl_c_typed_at_the_terminal_reaches_run_which_releases_the_job(
    harness: Harness,
) -> None:
    """The terminal's SIGINT goes to its foreground group, `run`'s (not the command's): `run`
    stops the command and releases the job, exit 130."""
    job = harness.enqueue()
    master, slave = pty.openpty()
    try:
        proc = _run(
            harness,
            ["--grace", "5s"],
            ["sh", "-c", "echo ready; read -r line"],
            stdin=slave,
            terminal=True,
        )
        os.close(slave)
        assert proc.stdout is not None
        _read_until(proc.stdout.fileno(), b"ready\n")
        os.write(master, b"\x03")  # ^C, as typed (ISIG is on in a fresh pty)
        assert proc.wait(DEADLINE) == 130
    finally:
        os.close(master)
    assert harness.job(job)["status"] == "queued"
