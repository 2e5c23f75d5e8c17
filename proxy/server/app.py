"""The aiohttp application: routes, the middlewares, and the lifecycle of shared services."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from proxy.errors import MethodNotAllowed, NotFound, ProxyError
from proxy.server import client_body, completions, passthrough
from proxy.server.drain import CUT_WAIT_S, Drain
from proxy.server.logs import get_logger
from proxy.server.metrics import Metrics
from proxy.server.origins import origins_for
from proxy.server.pipeline import Pipeline
from proxy.server.request_line import RequestLine
from proxy.server.services import SERVICES, Services
from proxy.server.upstream import UpstreamClient
from proxy.settings import Settings
from proxy.threads import tenant_digest


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), headers=headers,
                        content_type="application/json")


def render_error(error: ProxyError) -> web.Response:
    return json_response(error.status, error.body(), error.headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    unrouted = request.match_info.http_exception
    if unrouted is not None:
        return _unserved(request, unrouted)
    try:
        return await handler(request)
    except ProxyError as error:
        return render_error(error)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return render_error(_from_http_exception(request, exc))
    except Exception:
        request.app[SERVICES].log.exception("unhandled_error", path=request.path,
                                            method=request.method)
        return render_error(unhandled_error())


def _unserved(request: web.Request, exc: web.HTTPException) -> web.Response:
    """A path or method no route takes. The proxy answers it, so it has a request line like any
    other request: a client whose base URL lacks `/v1` shows up in the log and the metrics."""
    services = request.app[SERVICES]
    error = _from_http_exception(request, exc)
    with RequestLine(services.log, services.metrics, "other", path=request.path,
                     method=request.method, tenant=tenant_digest(request.headers)) as line:
        line.set(status=error.status, error=error.code or error.type)
    return render_error(error)


def unhandled_error() -> ProxyError:
    return ProxyError("The proxy failed to handle this request; see its log.", code="proxy_error")


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> ProxyError:
    if exc.status == 405:
        return MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}.")
    if exc.status == 404:
        return NotFound(f"Unknown path {request.path}: the proxy serves /v1/*, /healthz "
                        "and /metrics.")
    error = ProxyError(exc.reason or "Request failed.")
    error.status = exc.status
    error.type = "invalid_request_error"
    return error


async def healthz(request: web.Request) -> web.Response:
    return json_response(200, {"status": "ok"})


def build_app(settings: Settings, *, pipeline: Pipeline | None = None) -> web.Application:
    log = get_logger("proxy")
    services = Services(settings=settings, upstream=UpstreamClient(settings.server.upstream_pool_size),
                        log=log, drain=Drain(settings.server.shutdown_grace_s, log))
    services.metrics = Metrics()
    services.pipeline = pipeline or Pipeline(settings, client=services.upstream, log=services.log,
                                             metrics=services.metrics)
    services.origins = origins_for(settings, getattr(services.pipeline, "store", None),
                                   getattr(services.pipeline, "clock", time.time), log)
    app = web.Application(middlewares=[error_middleware, services.drain.middleware],
                          client_max_size=settings.server.max_body_bytes)
    app[SERVICES] = services
    app.on_shutdown.append(services.drain.on_shutdown)
    app.cleanup_ctx.append(_lifecycle)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", services.metrics.handler)
    expect = client_body.expect_continue
    app.router.add_post("/v1/chat/completions", completions.chat_completions,
                        expect_handler=expect)
    app.router.add_post("/v1/responses", completions.responses, expect_handler=expect)
    app.router.add_route("*", "/v1/{tail:.*}", passthrough.passthrough,
                         expect_handler=client_body.expect_upload)
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
    yield
    # aiohttp has force-closed connections whose handlers outlived the drain: let those
    # handlers end before the store closes under them.
    if not await services.drain.settle(CUT_WAIT_S):
        services.log.warning("handlers_still_running", requests=services.drain.in_flight)
    stop = getattr(services.pipeline, "stop", None)
    if stop is not None:
        await stop()
    await services.upstream.close()
