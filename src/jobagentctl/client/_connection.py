"""One server reached over HTTP with one API key: the only code of the client that touches the
network. So every httpx error and HTTP status is translated in one place
(:func:`jobagentctl.client._errors.translate`), and every body read the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel, SecretStr
from pydantic import ValidationError as PydanticValidationError

from jobagentctl import __version__
from jobagentctl.client._errors import translate
from jobagentctl.client._trace import Tracer
from jobagentctl.errors import AuthError, ConfigError
from jobagentctl.routes import API_PREFIX

if TYPE_CHECKING:
    import ssl

__all__ = ["USER_AGENT", "Connection", "ConnectionOptions", "base_url"]

USER_AGENT = f"jobagentctl/{__version__}"
API_KEY_HEADER = "X-API-Key"
# How long an idle pooled connection is kept (httpx's default is 5 s): longer than an agent's
# heartbeat interval (lease/3, 20 s by default), so heartbeats reuse one connection where the
# server keeps it open (its keyed_keep_alive_timeout, 75 s by default), and shorter than that,
# so the client is not the one to find it closed. A connection the server has closed meanwhile
# is seen as such before reuse, and replaced.
KEEPALIVE_SECONDS = 60.0
# Extra read time on top of a long-poll's wait, so the server answers 204 before we give up.
LONG_POLL_MARGIN = 10.0

T = TypeVar("T")


def base_url(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/api`` (the connection appends ``/api`` itself);
    :class:`ConfigError` for anything but an http(s) URL with a host."""
    base = url.strip().rstrip("/").removesuffix(API_PREFIX)
    try:
        parsed = httpx.URL(base)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"invalid server URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"invalid server URL {url!r}: use http(s)://host[:port]")
    return base


def _needs_tls(base: str) -> bool:
    """Whether to load the CA bundle: not for a plain http:// server (~25 ms of every start).

    Redirects are never followed and every path is relative, so such a client opens no TLS
    connection. A proxy from the environment may be in the way, though, and it may speak TLS.
    """
    if not base.startswith("http://"):
        return True
    import urllib.request

    return bool(urllib.request.getproxies())


def _verify(base: str, ca_bundle: str | Path | None) -> ssl.SSLContext | bool:
    """How the server's certificate is checked: ``ca_bundle`` (a PEM file or a directory of
    them), else ``SSL_CERT_FILE`` as Python tools read it, else httpx's default (certifi's
    bundle, or ``SSL_CERT_DIR``). Never an unverified connection: a plain http:// server gets
    no TLS context at all (``False`` is never used for https). The context resumes the
    server's TLS session when a connection is made anew (``_tls.py``)."""
    if not _needs_tls(base):
        return False
    if ca_bundle is None:
        ca_bundle = os.environ.get("SSL_CERT_FILE") or None
        origin = "SSL_CERT_FILE"
    else:
        origin = "the CA bundle"
    from jobagentctl.client._tls import resuming_context

    if ca_bundle is None:
        return resuming_context()
    path = Path(ca_bundle).expanduser()
    try:
        if path.is_dir():
            return resuming_context(capath=path)
        return resuming_context(cafile=path)
    except OSError as exc:  # ssl.SSLError is one: a file with no certificate in it
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ConfigError(f"cannot use {origin} {path}: {reason}") from None


@dataclass(frozen=True)
class ConnectionOptions:
    """How a :class:`Connection` reaches its server, besides the URL and the key.

    - ``timeout``: seconds for each request (a long-poll's read gets its wait on top);
    - ``ca_bundle``: the CA certificates trusted for an https:// server (:func:`_verify`);
    - ``trace``: receives the ``--debug`` lines;
    - ``transport``: an httpx transport in place of the network (tests).
    """

    timeout: float = 10.0
    ca_bundle: str | Path | None = None
    trace: Callable[[str], None] | None = None
    transport: httpx.BaseTransport | None = None


class Connection:
    """Requests to the API at ``url`` (with or without ``/api``), authenticated with
    ``api_key``.

    The key is checked before each request: a missing key raises :class:`AuthError` without
    touching the network. ``options`` says how the server is reached.
    """

    def __init__(
        self, url: str, api_key: str | SecretStr | None, options: ConnectionOptions
    ) -> None:
        self.url = base_url(url)
        secret = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key or "")
        self._api_key = SecretStr(secret.get_secret_value().strip())
        self.timeout = options.timeout
        hooks: dict[str, list[Callable[..., Any]]] = {}
        if options.trace is not None:
            tracer = Tracer(options.trace, redact=(API_KEY_HEADER,))
            hooks = {"request": [tracer.request], "response": [tracer.response]}
        self._http = httpx.Client(
            base_url=f"{self.url}{API_PREFIX}",
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            timeout=httpx.Timeout(options.timeout),
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS),
            transport=options.transport,
            event_hooks=hooks,
            verify=_verify(self.url, options.ca_bundle),
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def interrupt(self) -> int:
        """Shut down the sockets of the requests in flight (idle pooled ones are left alone); how
        many. Called from another thread. The request's own thread then fails at once (a
        :class:`ServerUnavailable`). The server sees the client leave, so a claim long-poll ends
        without claiming. The httpx library has no public way to reach a request's socket: the pool
        is walked through httpcore's attributes. Where they differ nothing is done, and the request
        ends as it would have."""
        import socket

        pool = getattr(getattr(self._http, "_transport", None), "_pool", None)
        shut = 0
        for conn in list(getattr(pool, "connections", None) or []):
            try:
                if conn.is_idle() or conn.is_closed():
                    continue
                stream = getattr(getattr(conn, "_connection", None), "_network_stream", None)
                sock = stream.get_extra_info("socket") if stream is not None else None
                if isinstance(sock, socket.socket):
                    sock.shutdown(socket.SHUT_RDWR)
                    shut += 1
            except (OSError, AttributeError):
                continue  # already closed, or not the shape we know
        return shut

    def send(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        params: Mapping[str, Any] | None = None,
        wait_seconds: float | None = None,
        v2_route: bool = False,
    ) -> httpx.Response:
        """Send one request; any failure leaves as a project error. ``body``: a request model,
        sent as camelCase JSON without its unset fields; ``params`` that are None are left out.

        ``wait_seconds``: the server may hold the request that long (a long-poll), so the read
        must outlast it. ``v2_route``: only servers with leases have the route, so a 404/405
        without our error code means the route is missing (:class:`LeaseUnsupported`).
        """
        key = self._api_key.get_secret_value()
        if not key:
            raise AuthError(
                "no API key: set JOBAGENTCTL_API_KEY, use --api-key-file, or put api_key in a "
                "config profile"
            )
        timeout: Any = httpx.USE_CLIENT_DEFAULT
        if wait_seconds is not None:
            read = wait_seconds + self.timeout + LONG_POLL_MARGIN
            timeout = httpx.Timeout(self.timeout, read=read)
        headers = {API_KEY_HEADER: key}
        content = None
        if body is not None:
            # Encoded by pydantic (compiled) rather than httpx's stdlib json: a log append of
            # 512 KiB took 29 ms in json.dumps alone, on the shipper's thread.
            content = body.model_dump_json(by_alias=True, exclude_none=True).encode()
            headers["Content-Type"] = "application/json"
        try:
            response = self._http.request(
                method,
                path,
                content=content,
                params={k: v for k, v in (params or {}).items() if v is not None},
                headers=headers,
                timeout=timeout,
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise translate(exc, v2_route=v2_route) from exc
        return response

    def call(self, method: str, path: str, model: Callable[[Any], T], **options: Any) -> T:
        """:meth:`send` (with ``options``), then the answer's JSON body through ``model``."""
        return parse(self.send(method, path, **options), model)


def parse(response: httpx.Response, model: Callable[[Any], T]) -> T:
    """The response's JSON body through ``model``; a body of another shape is a
    :class:`ProtocolError`."""
    try:
        return model(response.json())
    except (ValueError, PydanticValidationError) as exc:
        raise translate(exc) from exc
