"""The server's ASGI app: the store, the lease service, the reaper and the HTTP edge, wired.

Every request enters through ``edge.Edge``: admission (key, body limit, JSON depth), then the
response step (metric and 5xx log). The hot endpoints may be answered by the fast path
(``fastpath.py``) before the framework's routing runs. The endpoints themselves are declared
and implemented once in ``operations.py``; ``routing.py`` routes the framework to them,
``failures.py`` answers every error as ``{message, code, details}``, ``openapi.py`` completes
the document.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI

from jobagentctl import __version__
from jobagentctl.routes import API_PREFIX
from jobagentctl.server.http.auth import Authenticator
from jobagentctl.server.http.edge import Edge
from jobagentctl.server.http.failures import add_error_handlers
from jobagentctl.server.http.fastpath import FastPath
from jobagentctl.server.http.metrics import Metrics
from jobagentctl.server.http.openapi import document_api
from jobagentctl.server.http.routing import add_api_routes, add_operational_routes
from jobagentctl.server.reaper import Reaper
from jobagentctl.server.service import JobService
from jobagentctl.server.settings import ServerSettings
from jobagentctl.server.store import Store

if TYPE_CHECKING:
    from jobagentctl.server.upstream.worker import GatewayWorker

__all__ = ["API_PREFIX", "create_app"]


def create_app(settings: ServerSettings | None = None, store: Store | None = None) -> Edge:
    """The ASGI app: the edge, wrapping the framework app (``Edge.framework``).

    Without ``store`` it opens (and migrates) one from ``settings.database`` in its lifespan.
    It closes that store on shutdown; a given store is the caller's to open and close.
    The reaper runs in the lifespan when ``reap_interval`` > 0.
    """
    settings = settings or ServerSettings()
    owns_store = store is None
    if store is None:
        from jobagentctl.server.store import open_store

        store = open_store(settings.database, **settings.store_options())
    metrics = Metrics()
    auth = Authenticator(
        store, ttl=settings.key_cache_seconds, lookup_timeout=settings.database_timeout
    )
    service: JobService
    gateway: GatewayWorker | None = None
    if settings.gateway:
        # Gateway mode: ctrlplane holds the jobs' status (server/upstream/, docs/gateway.md).
        from jobagentctl.server.upstream.client import UpstreamClient
        from jobagentctl.server.upstream.metrics import UpstreamMetrics
        from jobagentctl.server.upstream.service import GatewayService
        from jobagentctl.server.upstream.worker import GatewayWorker

        upstream = UpstreamClient(
            str(settings.upstream_url),
            settings.upstream_key(),
            UpstreamMetrics(metrics.registry),
            timeout=settings.upstream_timeout,
        )
        service = GatewayService(store, settings, metrics, upstream, key_check=auth.reverify)
        gateway = GatewayWorker(service)
    else:
        service = JobService(store, settings, metrics, key_check=auth.reverify)
    reaper = Reaper(
        store,
        interval=settings.reap_interval,
        batch_size=settings.reap_batch_size,
        max_reclaims=settings.max_reclaims,
        metrics=metrics,
        log_retention=settings.log_retention,
        reap_with=gateway.reap if gateway is not None else None,
    )
    app = FastAPI(
        title="jobagentctl",
        version=__version__,
        description="Pull-based job agents with leases: ctrlplane's pull-agent API (V1) plus "
        "the V2 lease additions (claim-next, heartbeat, claims, attempts).",
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
        lifespan=_lifespan(
            store,
            service,
            reaper,
            owns_store=owns_store,
            reaps=settings.reap_interval > 0,
            gateway=gateway,
        ),
        strict_content_type=False,
    )
    app.state.settings, app.state.store, app.state.metrics = settings, store, metrics
    app.state.service, app.state.auth, app.state.reaper = service, auth, reaper
    add_error_handlers(app)
    add_operational_routes(app, service, metrics)
    add_api_routes(app, service)
    document_api(app)
    # Built once, around the finished app, as Starlette's build_middleware_stack wraps its router.
    return Edge(
        app,
        auth=auth,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        max_json_depth=settings.max_json_depth,
        fast_path=FastPath(service) if settings.fast_path else None,
    )


def _lifespan(
    store: Store,
    service: JobService,
    reaper: Reaper,
    *,
    owns_store: bool,
    reaps: bool,
    gateway: GatewayWorker | None = None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: open and migrate an owned store, start the reaper (``reaps``) and the
    gateway's worker. On shutdown: wake the long-polls, stop them, close an owned store."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if owns_store:
            await store.open()
            await store.migrate()
        if reaps:
            reaper.start()
        if gateway is not None:
            gateway.start()
        try:
            yield
        finally:
            service.begin_shutdown()
            await reaper.stop()
            if gateway is not None:
                await gateway.stop()
                await gateway.upstream.aclose()
            if owns_store:
                await store.close()

    return lifespan
