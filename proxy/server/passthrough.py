"""Every `/v1/*` request that is not a chat completion or a response: forwarded untouched.

Models, embeddings, files, stored responses, ...: method, path, query, body and headers go
upstream as sent (minus hop-by-hop), and the answer comes back as a byte stream with its status,
headers and encoding unchanged.
"""

from __future__ import annotations

from aiohttp import web

from proxy import jsonio
from proxy.server.client_body import read_client_body
from proxy.server.headers import client_response_headers, upstream_request_headers
from proxy.server.relay import PlainTap, relay_stream
from proxy.server.request_line import RequestLine, clipped
from proxy.server.services import SERVICES
from proxy.server.upstream import upstream_path
from proxy.threads import tenant_digest


def model_of(body: bytes, content_type: str) -> str:
    """The `model` of a JSON body, for routing; "" when there is none."""
    if not body or "json" not in content_type:
        return ""
    try:
        doc = jsonio.loads(body)
    except ValueError:
        return ""
    model = doc.get("model") if isinstance(doc, dict) else None
    return model if isinstance(model, str) else ""


async def passthrough(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    threads = services.settings.threads
    with RequestLine(services.log, services.metrics, "passthrough", path=request.path, method=request.method, passthrough=True,
                     tenant=tenant_digest(request.headers)) as line:
        path = upstream_path(request.raw_path)
        body = await read_client_body(request, services.settings.server.max_body_mb)
        model = model_of(body, request.content_type)
        upstream = services.route(model)
        line.set(model=clipped(model) or None, upstream=upstream.name, bytes_in=len(body))
        headers = upstream_request_headers(
            request.headers, api_key=upstream.api_key,
            drop=() if threads.forward_headers else threads.headers)
        line.calling_upstream()
        response = await services.upstream.send(
            upstream, request.method, path, headers, body or None)
        async with response:
            line.set(status=response.status)
            line.mark_upstream()
            out_headers = client_response_headers(response.headers)
            if response.headers.get("Content-Length") is not None:
                out_headers["Content-Length"] = response.headers["Content-Length"]
            outcome = await relay_stream(request, response, out_headers, PlainTap(), line.started)
            line.set(bytes_out=outcome.bytes_out, upstream_error=outcome.upstream_error)
            return outcome.response
