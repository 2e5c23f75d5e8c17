"""`POST /v1/chat/completions` and `POST /v1/responses`: the handler, as a recipe of named steps.

Read and check the request, route it, find its thread, let the pipeline prepare the projection,
forward it, relay the answer (streams as they come), and let the pipeline record what the answer
reported. The pipeline (`proxy/server/pipeline.py`) is where compaction plugs in.
"""

from __future__ import annotations

from aiohttp import web

from proxy.conversation import Api
from proxy.inbound import Inbound, leading_bytes, parse_inbound
from proxy.server.headers import client_response_headers, upstream_request_headers
from proxy.server.relay import is_event_stream, relay_stream, whole_response
from proxy.server.request_line import RequestLine
from proxy.server.services import SERVICES, Services
from proxy.server.upstream import read_body, upstream_path
from proxy.threads import ThreadIdentity, resolve_thread, tenant_digest


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, Api.CHAT)


async def responses(request: web.Request) -> web.StreamResponse:
    return await _complete(request, Api.RESPONSES)


async def _complete(request: web.Request, api: Api) -> web.StreamResponse:
    services = request.app[SERVICES]
    with RequestLine(services.log, services.metrics, api.value, path=request.path, method=request.method,
                     tenant=tenant_digest(request.headers)) as line:
        body = await request.read()
        line.set(bytes_in=len(body))
        inbound = parse_inbound(api, body)
        upstream = services.route(inbound.model)
        identity = _identity(request, inbound, services)
        line.set(model=inbound.model, stream=inbound.stream, upstream=upstream.name,
                 thread=_loggable(identity.thread), thread_source=identity.source)
        prepared = await services.pipeline.prepare(inbound, identity, upstream, line)
        if prepared.answer is not None:
            line.set(status=prepared.answer.status)
            return prepared.answer
        headers = upstream_request_headers(
            request.headers, api_key=upstream.api_key, identity_encoding=True,
            drop=() if services.settings.threads.forward_headers else services.settings.threads.headers)
        path = upstream_path(request.path, request.query_string)
        response = await services.upstream.send(upstream, "POST", path, headers, prepared.body)
        async with response:
            line.set(status=response.status)
            line.mark_upstream()
            out_headers = client_response_headers(response.headers, prepared.response_headers)
            if is_event_stream(response):
                tap = prepared.stream_tap()
                outcome = await relay_stream(request, response, out_headers, tap, line.started)
                line.set(bytes_out=outcome.bytes_out, ttfb_ms=outcome.first_byte_ms,
                         upstream_error=outcome.upstream_error)
                await services.pipeline.finish_stream(prepared, tap, response.status, line)
                return outcome.response
            data = await read_body(response, upstream)
            line.set(bytes_out=len(data))
            await services.pipeline.finish_body(prepared, data, response.status, line)
            return whole_response(response.status, response.reason, out_headers, data)


def _identity(request: web.Request, inbound: Inbound, services: Services) -> ThreadIdentity:
    return resolve_thread(request.headers, inbound.doc, services.settings.threads,
                          leading_bytes(inbound))


def _loggable(thread: str | None) -> str | None:
    """Thread ids are client data: keep log lines short and printable."""
    if thread is None:
        return None
    printable = thread.isprintable() and len(thread) <= 128
    return thread if printable else repr(thread[:64])[1:-1] + f"...({len(thread)} chars)"
