"""The aiohttp application: routes, each served by `proxy.server.serving`, and the lifecycle
of shared services."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from aiohttp import web

from proxy.conversation import Api
from proxy.server import client_body, completions, passthrough
from proxy.server.drain import CUT_WAIT_S, Drain
from proxy.server.logs import get_logger
from proxy.server.metrics import Metrics
from proxy.server.origins import origins_for
from proxy.server.pipeline import Pipeline
from proxy.server.serving import Unserved, expecting, json_response, served
from proxy.server.services import SERVICES, Configured, Services
from proxy.server.upstream import UpstreamClient
from proxy.settings import Settings
from proxy.settings_diff import digest
from proxy.store.cached import CachedStore
from proxy.store.retention import Sweeper, sweeper_for


async def healthz(request: web.Request) -> web.Response:
    return json_response(200, {"status": "ok"})


def build_app(settings: Settings, *, pipeline: Pipeline | None = None) -> web.Application:
    log = get_logger("proxy")
    upstream, metrics = UpstreamClient(settings.server.upstream_pool_size), Metrics()
    pipeline = pipeline or Pipeline(settings, client=upstream, log=log, metrics=metrics)
    origins = origins_for(settings, getattr(pipeline, "store", None),
                          getattr(pipeline, "clock", time.time), log)
    services = Services(Configured(settings, pipeline, origins), upstream, log,
                        Drain(settings.server.shutdown_grace_s, log), metrics)
    metrics.config_loaded(digest(settings))
    app = web.Application(client_max_size=settings.server.max_body_bytes)
    app[SERVICES] = services
    app.on_shutdown.append(services.drain.on_shutdown)
    app.cleanup_ctx.append(_lifecycle)
    drain = services.drain
    unknown = expecting("other")  # an `Expect` other than 100-continue, answered as ours
    app.router.add_get("/healthz", served(healthz, drain), expect_handler=unknown)
    app.router.add_get("/metrics", served(services.metrics.handler, drain),
                       expect_handler=unknown)
    for path, api in (("/v1/chat/completions", Api.CHAT), ("/v1/responses", Api.RESPONSES)):
        app.router.add_post(path, served(completions.handler(services, api), drain),
                            expect_handler=expecting(str(api), client_body.expect_continue))
    app.router.add_route("*", "/v1/{tail:.*}", served(passthrough.passthrough, drain),
                         expect_handler=expecting("passthrough", client_body.expect_upload))
    app.router.register_resource(Unserved())  # last: it takes whatever the others do not
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    services = app[SERVICES]
    await services.upstream.start()
    start = getattr(services.pipeline, "start", None)
    try:
        if start is not None:
            await start()
    except BaseException:
        await services.upstream.close()  # the state did not open: nothing else will close it
        raise
    sweeper = _sweeper(services)
    if sweeper is not None:
        sweeper.start()
    yield
    # aiohttp has force-closed connections whose handlers outlived the drain: let those
    # handlers end before the store closes under them.
    if not await services.drain.settle(CUT_WAIT_S):
        services.log.warning("handlers_still_running", requests=services.drain.in_flight)
    if sweeper is not None:
        await sweeper.stop()
    stop = getattr(services.pipeline, "stop", None)
    if stop is not None:
        await stop()
    await services.upstream.close()


def _sweeper(services: Services) -> Sweeper | None:
    """Retention's sweep of the state (`state.retention_days`), across reloads: `state.*` takes
    a restart, and a reloaded pipeline shares the store."""
    pipeline = services.pipeline
    store = getattr(pipeline, "store", None)
    if not isinstance(store, CachedStore):
        return None
    return sweeper_for(store, services.settings.state.retention_s, services.log,
                       getattr(pipeline, "clock", time.time))
