"""What every request gets around its handler: errors answered in OpenAI's shape, the drain's
tracking and its shutdown cut, and an answer of the proxy's own for a path no route serves.

Done by wrapping each handler where it is registered, not by middlewares: with any middleware
at all aiohttp adds one of its own, and every request then runs through three more coroutines
(each a partial called with a keyword), whose frames each resumption of the handler passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_urldispatcher import _default_expect_handler

from proxy.errors import MethodNotAllowed, NotFound, ProxyError, ShuttingDown
from proxy.server.drain import CUT_MESSAGE, Drain, is_cut, resume_after_cut
from proxy.server.request_line import RequestLine
from proxy.server.services import SERVICES, Services
from proxy.threads import tenant_digest

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def tenant_of(services: Services, request: web.BaseRequest) -> str:
    """The request's tenant, by the credential headers of the config in force."""
    return tenant_digest(request.headers, services.configured.settings.threads.credential_headers)


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), headers=headers,
                        content_type="application/json")


def render_error(error: ProxyError) -> web.Response:
    response = json_response(error.status, error.body(), error.headers)
    if error.headers.get("Connection") == "close":
        # The header alone is only written: aiohttp would keep the connection open.
        response.force_close()
    return response


def unhandled_error() -> ProxyError:
    return ProxyError("The proxy failed to handle this request; see its log.", code="proxy_error")


def log_unhandled(request: web.Request, **facts: Any) -> None:
    """A proxy bug met serving `request`, with the traceback of the exception being handled:
    one event name finds every one, answered or not."""
    request.app[SERVICES].log.exception("unhandled_error", path=request.path,
                                        method=request.method, **facts)


def served(handler: Handler, drain: Drain) -> Handler:
    """`handler`, its task tracked by `drain`, and its failures answered as the client's errors."""

    async def serve(request: web.Request) -> web.StreamResponse:
        drain.track(asyncio.current_task())
        try:
            response = await handler(request)
            if drain.stopping:
                # `Connection: close` with it if it has not started yet; in any case the
                # connection ends with it (aiohttp takes its keep-alive from the answer).
                response.force_close()
            return response
        except ProxyError as error:
            return _instead(request, error)
        except asyncio.CancelledError as exc:
            if not is_cut(exc) or request.writer.output_size > 0:
                raise  # a client that left, or a cut answer that is already under way
            resume_after_cut()
            return render_error(ShuttingDown(CUT_MESSAGE, headers={"Connection": "close"}))
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _instead(request, _from_http_exception(request, exc))
        except Exception:
            log_unhandled(request)
            return _instead(request, unhandled_error())

    return serve


def _instead(request: web.Request, error: ProxyError) -> web.Response:
    """The error's answer, instead of the handler's. Once that one is under way nothing can
    replace it (a second answer would land inside its body): the connection closes instead,
    and the client sees the answer broken off."""
    if request.writer.output_size > 0:
        raise ConnectionResetError("the answer was under way: no error answer can follow it")
    return render_error(error)


def expecting(kind: str, expect: ExpectHandler = _default_expect_handler) -> ExpectHandler:
    """`expect`, the step aiohttp runs for a request's `Expect` header before any handler, with
    its refusal (an expectation other than 100-continue: 417) answered as the handlers'
    errors are. aiohttp's own is plain text quoting the header, and no line would tell of it."""

    async def check(request: web.Request) -> web.StreamResponse | None:
        try:
            return await expect(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            services = request.app[SERVICES]
            error = _from_http_exception(request, exc)
            with RequestLine(services.log, services.metrics, kind, path=request.path,
                             method=request.method, tenant=tenant_of(services, request)) as line:
                line.set(status=error.status, error=error.code or error.type)
            return render_error(error)

    return check


class Unserved(web.PlainResource):
    """The last resource, which takes every request the others do not (`OPTIONS *` and a path
    with an encoded newline, which no route pattern matches, included): the proxy answers it,
    so it has a request line like any other request, and a client whose base URL lacks `/v1`
    shows up in the log and the metrics. (A `CONNECT` never gets here: `refuse_tunnel`.)"""

    def __init__(self) -> None:
        super().__init__("/")
        self.add_route("*", self._answer, expect_handler=expecting("other"))

    def _match(self, path: str) -> dict[str, str] | None:
        return {}  # aiohttp's test of a path against the resource: any path matches

    async def _answer(self, request: web.Request) -> web.Response:
        services = request.app[SERVICES]
        error = await self._error(request)
        with RequestLine(services.log, services.metrics, "other", path=request.path,
                         method=request.method, tenant=tenant_of(services, request)) as line:
            line.set(status=error.status, error=error.code or error.type)
        return render_error(error)

    async def _error(self, request: web.Request) -> ProxyError:
        """405 when another resource has the path for other methods, else 404."""
        allowed: set[str] = set()
        for resource in request.app.router.resources():
            if resource is not self:
                allowed |= (await resource.resolve(request))[1]
        return _not_served(request, 405 if allowed else 404)


async def refuse_tunnel(services: Services, request: web.BaseRequest) -> web.Response:
    """A `CONNECT`: what a client given the proxy as its `HTTPS_PROXY` sends. No route can take
    one (aiohttp gives its URL no path), so the runner hands it here, to be answered as
    `Unserved` answers a method no route serves: a 405 and the request's line, its target as
    the path. The connection closes: the client meant a tunnel, and what follows is no HTTP."""
    error = MethodNotAllowed("The proxy is not a forward proxy and opens no CONNECT tunnels: "
                             "give it to the client as the OpenAI base URL "
                             "(http://<proxy host>:<port>/v1), not as HTTPS_PROXY.",
                             headers={"Connection": "close"})
    with RequestLine(services.log, services.metrics, "other", path=request.raw_path,
                     method=request.method, tenant=tenant_of(services, request)) as line:
        line.set(status=error.status, error=error.code)
    return render_error(error)


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> ProxyError:
    if exc.status in (404, 405):
        return _not_served(request, exc.status)
    if exc.status == 417:
        return _expectation_failed()
    error = ProxyError(exc.reason or "Request failed.")
    error.status = exc.status
    error.type = "invalid_request_error"
    return error


def _expectation_failed() -> ProxyError:
    # Not the header's value: a client's header is never quoted back or logged.
    error = ProxyError("The proxy meets only the expectation 100-continue: send the request "
                       "without this Expect header.", code="expectation_failed")
    error.status, error.type = 417, "invalid_request_error"
    return error


def _not_served(request: web.Request, status: int) -> ProxyError:
    if status == 405:
        return MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}.")
    return NotFound(f"Unknown path {request.path}: the proxy serves /v1/*, /healthz "
                    "and /metrics.")
