"""Run the server in this process: migrate, serve with uvicorn, drain on SIGTERM/SIGINT.

Shutdown order: stop accepting, wake long-polls (they answer 204), let in-flight requests
finish, stop the reaper, close the store. The ready line on stderr is what tests wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from typing import Any, cast

import uvicorn

from jobagentctl.errors import ConfigError, JobAgentError
from jobagentctl.server.http.app import create_app
from jobagentctl.server.http.connections import (
    EdgeLimits,
    connection_cap,
    guarded_protocol,
    listen_backlog,
    raise_fd_limit,
)
from jobagentctl.server.http.heap import YOUNG_THRESHOLD, Collector, settle_heap
from jobagentctl.server.http.tls import exposure_warnings, reload_certificate, server_context
from jobagentctl.server.service import JobService
from jobagentctl.server.settings import ServerSettings, redact_url
from jobagentctl.server.store import Store

__all__ = [
    "NOTHING_TO_RELOAD",
    "READY_LINE",
    "configure_logging",
    "event_loop_factory",
    "run_server",
    "serve",
]

READY_LINE = "jobagentctl server listening on"

logger = logging.getLogger("jobagentctl.server")


def configure_logging(level: str) -> None:
    """Plain lines on stderr; uvicorn's loggers share the handler. No secrets are logged:
    the API key header is never read into a log record and the database URL is redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        uv = logging.getLogger(name)
        uv.handlers[:] = []
        uv.propagate = True


class _Server(uvicorn.Server):
    """uvicorn's server with two changes:

    - long-polls are woken before the drain starts, so a 30 s wait does not hold shutdown;
    - a handled SIGTERM/SIGINT ends with exit status 0, not re-raised after the graceful shutdown.
    """

    def __init__(
        self, config: uvicorn.Config, service: JobService, *, tls: bool, settle: bool
    ) -> None:
        super().__init__(config)
        self._service = service
        self._tls = tls  # served by our TLS layer (connections.py), so uvicorn does not know
        self._settle = settle  # the process is the server's own: tune its collector
        self._collector: Collector | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            if self._settle:
                frozen, self._collector = settle_heap(asyncio.get_running_loop())
                every = (
                    f"{self._collector.seconds:g} s"
                    if self._collector is not None
                    else f"{YOUNG_THRESHOLD} allocations"
                )
                logger.info(
                    "heap: %d startup objects frozen, a young collection every %s", frozen, every
                )
            host, port = self._bound_address()
            shown = f"[{host}]" if ":" in host else host
            scheme = "https" if self._tls else "http"
            print(f"{READY_LINE} {scheme}://{shown}:{port}", file=sys.stderr, flush=True)

    def _log_started_message(self, listeners: Any) -> None:
        # uvicorn would say http://: it does not know of the TLS layer below the protocol.
        if not self._tls:
            super()._log_started_message(listeners)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._service.begin_shutdown()
        await super().shutdown(sockets)
        if self._collector is not None:
            self._collector.stop()

    def _bound_address(self) -> tuple[str, int]:
        for server in getattr(self, "servers", []):
            for sock in server.sockets or ():
                name = sock.getsockname()
                return str(name[0]), int(name[1])
        return self.config.host, self.config.port


def _protocol_options(
    settings: ServerSettings, tls: ssl.SSLContext | None = None
) -> dict[str, Any]:
    """The HTTP protocol with the connection limits (``connections.py``): httptools guarded by
    our subclass. Without httptools the server refuses to start. uvicorn's h11 protocol has no
    header or body timeout and no connection cap. So one slow client per descriptor would hold the
    server."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        raise ConfigError(
            "httptools is not installed: the server's connection limits (header and body "
            "timeouts, connection cap) need it; install the server extra: "
            "pip install 'jobagentctl[server]'"
        ) from None
    soft, hard = raise_fd_limit()
    cap = connection_cap(settings.max_connections, soft)
    if cap < settings.max_connections:
        logger.warning(
            "max_connections %d lowered to %d: the open-file limit is %d (hard %d)",
            settings.max_connections,
            cap,
            soft,
            hard,
        )
    limits = EdgeLimits(
        max_header_bytes=settings.max_header_bytes,
        header_timeout=settings.header_timeout,
        keep_alive_timeout=settings.keep_alive_timeout,
        keyed_keep_alive_timeout=settings.keyed_keep_alive_timeout,
        max_connections=cap,
        body_timeout=settings.body_timeout,
    )
    return {"http": guarded_protocol(limits, tls), "backlog": listen_backlog(soft)}


def _tls_context(settings: ServerSettings) -> ssl.SSLContext | None:
    """The HTTPS context of ``tls_cert``/``tls_key``; None for plain HTTP."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    return server_context(settings.tls_cert, settings.tls_key)


# The line a SIGHUP logs when nothing is reloadable: settings are read once, at start.
NOTHING_TO_RELOAD = "SIGHUP: nothing to reload (plain HTTP; other settings take a restart)"


def _reload_on_hangup(context: ssl.SSLContext | None, settings: ServerSettings) -> None:
    """SIGHUP reloads what can be reloaded and the server keeps serving. With TLS, the certificate
    and key files are served anew (a renewed certificate without a restart). Without, one line says
    there was nothing to reload. Without a handler the signal's default
    action would end the process, and operators send it (``ExecReload=kill -HUP``).
    Certificate files that do not work are logged, and the current certificate stays."""

    def reload() -> None:
        if context is None or settings.tls_cert is None or settings.tls_key is None:
            logger.info("%s", NOTHING_TO_RELOAD)
            return
        cert, key = settings.tls_cert, settings.tls_key
        try:
            reload_certificate(context, cert, key)
        except ConfigError as exc:
            logger.warning("TLS certificate not reloaded (still serving the previous one): %s", exc)
            return
        logger.info("SIGHUP: TLS certificate reloaded from %s", cert)
        for warning in exposure_warnings(settings):
            logger.warning("%s", warning)

    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals here (Windows)
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)


def _proxy_options(settings: ServerSettings) -> dict[str, Any]:
    """Forwarded headers (client address, scheme) trusted only from the proxies named."""
    if not settings.proxy_addresses:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": settings.proxy_addresses}


async def serve(
    settings: ServerSettings, store: Store | None = None, *, settle: bool = False
) -> None:
    """Serve until a signal asks to stop. The store (opened and migrated here when not given)
    is closed by the app's lifespan. ``settle``: the process is the server's alone, so its
    garbage collector is set for a large heap once started (``heap.settle_heap``)."""
    for warning in exposure_warnings(settings):
        logger.warning("%s", warning)
    tls = _tls_context(settings)
    # From the start: a reload sent while the database is opened and migrated must not kill.
    _reload_on_hangup(tls, settings)
    protocol = _protocol_options(settings, tls)  # refused before anything is opened
    if store is None:
        from jobagentctl.server.store import open_store

        store = open_store(settings.database, **settings.store_options())
    await store.open()
    try:
        applied = await store.migrate()  # SchemaTooNew: the database is past this release
        note = (await store.schema_window()).note()
    except BaseException:
        await store.close()
        raise
    if applied:
        logger.info("applied migrations %s", ", ".join(str(v) for v in applied))
    if note is not None:
        logger.warning("%s", note)
    app = create_app(settings, store=store)

    # The app was handed an opened store, so its lifespan does not close it: serve() does.
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_config=None,
        access_log=settings.access_log,
        timeout_graceful_shutdown=settings.shutdown_timeout,
        # uvicorn annotates int but only hands it to loop.call_later: a float is fine.
        timeout_keep_alive=cast(int, settings.keep_alive_timeout),
        server_header=False,
        **_proxy_options(settings),
        **protocol,
    )
    server = _Server(config, app.framework.state.service, tls=tls is not None, settle=settle)
    logger.info(
        "starting: database %s (%s), lease %ss in [%s, %s], reap every %ss",
        redact_url(settings.database),
        store.dialect,
        settings.default_lease,
        settings.min_lease_seconds,
        settings.max_lease_seconds,
        settings.reap_interval,
    )
    try:
        await server.serve()
    except SystemExit as exc:
        # uvicorn exits the interpreter when it cannot bind; it has logged why.
        raise JobAgentError(
            f"could not listen on {settings.host}:{settings.port} (see the log above)"
        ) from exc
    finally:
        await store.close()
    logger.info("stopped")


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop ``serve`` runs on: uvloop when ``name`` is ``auto`` and uvloop is installed,
    or ``uvloop`` (an error if it is not); ``asyncio`` = the standard loop (None)."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise ConfigError("loop = uvloop, but uvloop is not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_server(settings: ServerSettings) -> None:
    """Blocking entry point of ``jobagentctl server start``."""
    configure_logging(settings.log_level)
    factory = event_loop_factory(settings.loop)
    logger.info("event loop: %s", "uvloop" if factory is not None else "asyncio")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(settings, settle=True))
