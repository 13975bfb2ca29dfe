"""Client TLS contexts that resume the server's TLS session on a new connection.

httpcore wraps each new socket with ``SSLContext.wrap_socket`` and no ``session``. So every
connection an agent makes anew is a full handshake: a certificate check and a key exchange on both
sides. That is after the server or the pool closed an idle one, or after a restart. Python resumes
only when handed the previous session. Under TLS 1.3 it arrives as a ticket after the handshake,
readable from the socket until it is closed. The sockets of :class:`ResumingContext` keep their
session when they close, and the next socket to the same host offers it. A resumed handshake skips
the certificate chain and its verification. A server that does not accept the session (another
process, restarted) simply does a full handshake.
"""

from __future__ import annotations

import os
import ssl
import threading
from pathlib import Path
from typing import Any

__all__ = ["ResumingContext", "resuming_context"]


class _Socket(ssl.SSLSocket):
    """An SSL socket that leaves its session to its context when closed."""

    context: ResumingContext

    def close(self) -> None:
        self.context.keep(self)
        super().close()


class ResumingContext(ssl.SSLContext):
    """A client context whose new sockets offer the last session kept for their host."""

    sslsocket_class = _Socket
    _sessions: dict[str, ssl.SSLSession]
    _lock: threading.Lock

    def keep(self, sock: ssl.SSLSocket) -> None:
        """Remember ``sock``'s session for its host, when it is one a server can resume."""
        try:
            session = sock.session
        except (ValueError, OSError):  # closed, or never connected
            return
        host = sock.server_hostname
        if session is None or host is None or not (session.has_ticket or session.id):
            return
        with self._lock:
            self._sessions[host] = session

    def wrap_socket(
        self,
        sock: Any,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        if session is None and not server_side and isinstance(server_hostname, str):
            with self._lock:
                session = self._sessions.get(server_hostname)
        return super().wrap_socket(
            sock,
            server_side=server_side,
            do_handshake_on_connect=do_handshake_on_connect,
            suppress_ragged_eofs=suppress_ragged_eofs,
            server_hostname=server_hostname,
            session=session,
        )


def resuming_context(
    cafile: str | Path | None = None, capath: str | Path | None = None
) -> ssl.SSLContext:
    """What ``ssl.create_default_context`` makes for a client, as a :class:`ResumingContext`:
    certificates checked against ``cafile``/``capath``, else httpx's default (``SSL_CERT_DIR``,
    else certifi's bundle). ``OSError`` (``ssl.SSLError``) for an unusable file."""
    context = ResumingContext(ssl.PROTOCOL_TLS_CLIENT)
    context._sessions = {}
    context._lock = threading.Lock()
    if cafile is None and capath is None:
        capath = os.environ.get("SSL_CERT_DIR") or None
        if capath is None:
            import certifi

            cafile = certifi.where()
    context.load_verify_locations(
        cafile=None if cafile is None else str(cafile),
        capath=None if capath is None else str(capath),
    )
    return context
