"""Secrets handed over at run time: Inside a job, `jobagentctl redact add` gives `run` a value to
redact from then on. It goes through a Unix socket only the job's own processes may use.

The socket lives in a private directory (0700) of its own, removed when the job ends.
``JOBAGENTCTL_REDACT_SOCKET`` names it to the job's command, and ``JOBAGENTCTL_RUN_PID`` gives
`run`'s pid. Both ends check the other:

- `run` serves a connection only from our own user and a process in the command's session
  (``SO_PEERCRED``); any other is closed unanswered.
- The :func:`hand_over` function sends only to `run` itself. The directory is opened without
  following a link, and must be ours and 0700. The socket in it must be ours, and the listener's pid
  (``SO_PEERCRED``) the one `run` exported. Otherwise :class:`PeerRefused`, and the value is not
  sent.

One exchange per connection: the value, the end of the writing side, then one word back.
"""

from __future__ import annotations

import errno
import os
import selectors
import shutil
import socket
import stat
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import cast

from jobagentctl.models import REDACT_SOCKET_ENV, RUN_PID_ENV
from jobagentctl.supervisor.console import Log
from jobagentctl.supervisor.output.redact import Redactor, redactable
from jobagentctl.supervisor.process.jobfiles import socket_directory

__all__ = ["ADDED", "MAX_VALUE_BYTES", "TOO_SHORT", "HandoverSocket", "PeerRefused", "hand_over"]

# The biggest value one `redact add` may hand over.
MAX_VALUE_BYTES = 65536
# The answers: the value is redacted from now on, or it is too short to be.
ADDED = b"added"
TOO_SHORT = b"short"
# How long one connection may take to send its value, from its start: a value is at most 64 KiB
# over a local socket, so this is headroom for a busy machine, not for a slow peer.
_CONNECTION_SECONDS = 5.0
# Connections served at once (each holds at most MAX_VALUE_BYTES): more are refused.
_MAX_CONNECTIONS = 64
# The socket's name in its directory.
_SOCKET_NAME = "s"


class HandoverSocket:
    """Listens for values to redact and adds them to ``redactor``, from a daemon thread.

    Until :meth:`admit` names the command's session, every connection is refused.
    """

    def __init__(
        self, redactor: Redactor, log: Log, *, connection_seconds: float = _CONNECTION_SECONDS
    ) -> None:
        self._redactor = redactor
        self._log = log
        self._connection_seconds = connection_seconds
        self._session: int | None = None
        # Locked while we live, so a later run sweeps it if we are killed (jobfiles.py).
        self.directory, self._lock_fd = socket_directory(_SOCKET_NAME)
        self.path = self.directory / _SOCKET_NAME
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(str(self.path))
            self._server.listen(8)
        except OSError:
            self._server.close()
            shutil.rmtree(self.directory, ignore_errors=True)
            os.close(self._lock_fd)
            raise
        self._server.setblocking(False)
        # close() writes here to wake the thread at once.
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._serve, name="redact-handover", daemon=True)
        self._thread.start()

    def environment(self) -> dict[str, str]:
        """The variables that lead the job's `redact add` here (and to nothing else)."""
        return {REDACT_SOCKET_ENV: str(self.path), RUN_PID_ENV: str(os.getpid())}

    def admit(self, session: int) -> None:
        """Serve the processes of session ``session`` (the command's) from now on."""
        self._session = session

    def close(self) -> None:
        """Stop listening and remove the socket and its directory."""
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=2.0)
        self._server.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        shutil.rmtree(self.directory, ignore_errors=True)
        os.close(self._lock_fd)

    def _serve(self) -> None:
        """Serve every connection at once, each within its own deadline. One that stalls (or sends
        slowly) holds up nobody else, and is dropped when its time is up."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ)
            selector.register(self._server, selectors.EVENT_READ)
            pending: dict[socket.socket, _Pending] = {}
            try:
                self._loop(selector, pending)
            finally:
                for connection in pending:
                    connection.close()

    def _loop(
        self, selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending]
    ) -> None:
        while True:
            now = time.monotonic()
            for connection in [c for c, p in pending.items() if p.deadline <= now]:
                self._log.debug("redact add: a connection did not send its value in time: dropped")
                self._drop(selector, pending, connection)
            timeout = min((p.deadline for p in pending.values()), default=None)
            try:
                events = selector.select(None if timeout is None else max(0.0, timeout - now))
            except (OSError, ValueError):
                return  # closed under us
            for key, _ in events:
                if key.fileobj == self._wake_r:
                    return
                if key.fileobj is self._server:
                    self._accept(selector, pending)
                else:
                    connection = cast(socket.socket, key.fileobj)
                    self._receive(selector, pending, connection)

    def _accept(
        self, selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending]
    ) -> None:
        try:
            connection, _ = self._server.accept()
        except OSError:
            return  # the peer gave up in between (or we are closing)
        if not self._from_the_job(connection):
            self._log.warn("redact add: refused a connection from outside the job")
            connection.close()
            return
        if len(pending) >= _MAX_CONNECTIONS:
            self._log.warn("redact add: too many connections at once: one refused")
            connection.close()
            return
        connection.setblocking(False)
        pending[connection] = _Pending(time.monotonic() + self._connection_seconds)
        selector.register(connection, selectors.EVENT_READ)

    def _receive(
        self,
        selector: selectors.BaseSelector,
        pending: dict[socket.socket, _Pending],
        connection: socket.socket,
    ) -> None:
        state = pending[connection]
        try:
            chunk = connection.recv(65536)
        except BlockingIOError:
            return
        except OSError as exc:
            self._log.debug(f"redact add: connection failed: {exc}")
            self._drop(selector, pending, connection)
            return
        if chunk:
            state.size += len(chunk)
            if state.size > MAX_VALUE_BYTES:
                self._drop(selector, pending, connection)  # unanswered: too long
            else:
                state.chunks.append(chunk)
            return
        value = b"".join(state.chunks)
        state.chunks.clear()
        try:
            # The answer is a few bytes: the socket's buffer takes it at once.
            if not redactable(value):
                connection.send(TOO_SHORT)
            else:
                self._redactor.add(value)
                connection.send(ADDED)
                self._log.debug("redact add: one more value is redacted from now on")
        except OSError as exc:
            self._log.debug(f"redact add: connection failed: {exc}")
        self._drop(selector, pending, connection)

    @staticmethod
    def _drop(
        selector: selectors.BaseSelector,
        pending: dict[socket.socket, _Pending],
        connection: socket.socket,
    ) -> None:
        selector.unregister(connection)
        del pending[connection]
        connection.close()

    def _from_the_job(self, connection: socket.socket) -> bool:
        session = self._session
        if session is None:
            return False
        peercred = getattr(socket, "SO_PEERCRED", None)
        if peercred is None:
            return True  # no peer credentials here: the 0700 directory is the only fence
        ucred = struct.Struct("3i")
        pid, uid, _ = ucred.unpack(connection.getsockopt(socket.SOL_SOCKET, peercred, ucred.size))
        try:
            return uid == os.getuid() and os.getsid(pid) == session
        except OSError:
            return False  # gone already


@dataclass
class _Pending:
    """A connection being read: its deadline and what it sent so far."""

    deadline: float
    size: int = 0
    chunks: list[bytes] = field(default_factory=list)


def _read_all(connection: socket.socket, limit: int) -> bytes | None:
    """Everything the peer sends up to the end of its writing side; None past ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


class PeerRefused(Exception):
    """What listens at the socket's path is not the job's `run` (or cannot be shown to be):
    the value was not sent. The message says why."""


def hand_over(path: str, value: bytes, *, run_pid: int, timeout: float = 10.0) -> bool:
    """Give ``value`` to the `run` (pid ``run_pid``) listening at ``path``: True once it is
    redacted, False when it is too short to be.

    :class:`PeerRefused` when the socket is not that `run`'s (nothing is sent); OSError when
    no `run` answers (none there, or we are not its job's).
    """
    directory, name = os.path.split(path)
    directory_fd = _open_private_directory(directory or ".")
    try:
        _check_socket_file(directory_fd, name, path)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            _connect_under(connection, directory_fd, name)
            _check_listener(connection, run_pid)
            connection.sendall(value)
            connection.shutdown(socket.SHUT_WR)
            answer = _read_all(connection, 64)
    finally:
        os.close(directory_fd)
    if answer == ADDED:
        return True
    if answer == TOO_SHORT:
        return False
    raise ConnectionRefusedError("the connection was closed without an answer")


def _open_private_directory(directory: str) -> int:
    """The socket's directory, opened without following a link, and checked: ours, 0700. A link, or
    a directory renamed and replaced, is not the one `run` made."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PeerRefused(f"{directory} is not a directory but a link or a file") from None
        raise
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid() or mode != 0o700:
        os.close(fd)
        raise PeerRefused(
            f"{directory} is not private (owner uid {info.st_uid}, mode {mode:04o}):"
            f" `run` makes it ours and 0700"
        )
    return fd


def _check_socket_file(directory_fd: int, name: str, path: str) -> None:
    info = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise PeerRefused(f"{path} is not a socket of ours")


def _connect_under(connection: socket.socket, directory_fd: int, name: str) -> None:
    """Connect to ``name`` in the directory open at ``directory_fd``: the directory that was
    checked, whatever its path names by now."""
    through_proc = f"/proc/self/fd/{directory_fd}"
    if os.path.isdir(through_proc):
        connection.connect(f"{through_proc}/{name}")
        return
    # No /proc: connect from inside the directory (we are a short-lived, one-thread command).
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fchdir(directory_fd)
        connection.connect(name)
    finally:
        os.fchdir(here)
        os.close(here)


def _check_listener(connection: socket.socket, run_pid: int) -> None:
    """The process listening is `run` (``run_pid``), of our user: the kernel says so."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        raise PeerRefused("this system cannot tell who listens on a Unix socket (no SO_PEERCRED)")
    ucred = struct.Struct("3i")
    pid, uid, _ = ucred.unpack(connection.getsockopt(socket.SOL_SOCKET, peercred, ucred.size))
    if uid != os.getuid() or pid != run_pid:
        raise PeerRefused(
            f"the socket's listener is process {pid} (uid {uid}), not this job's"
            f" `jobagentctl run` (process {run_pid})"
        )
