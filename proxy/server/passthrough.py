"""Every `/v1/*` request that is not a chat completion or a response: forwarded untouched.

Models, embeddings, files, stored responses, ...: method, path, query, body and headers go
upstream as sent (minus hop-by-hop), and the answer comes back as a byte stream with its status,
headers and encoding unchanged. A response's event stream resumed by id is relayed the same, but
read on the way: cut short, it ends with an `error` event as a pipeline stream does.

Routing: a request on a stored response, chat completion or conversation the proxy saw made
goes to the upstream that made it (`proxy/server/origins.py`); any other goes by the `model` of
its JSON body, else of its query (`GET /v1/chat/completions?model=...`), else of its path (`GET
/v1/models/{model}`), else by the route of model "". The answer to `POST /v1/conversations` is
read before it is relayed, so the conversation it made is remembered before the client can
name it.
"""

from __future__ import annotations

from aiohttp import ClientResponse, hdrs, web

from proxy import jsonio
from proxy.errors import NotFound, NotImplementedHere
from proxy.server.client_body import read_client_body, streamed_upload
from proxy.server.headers import client_response_headers, upstream_request_headers
from proxy.server.inflate import AnswerTooLarge, answer_encoding, inflated
from proxy.server.origins import Origins, names_the_object, scoped_id
from proxy.server.relay import PlainTap, StreamTap, is_event_stream, relay_stream
from proxy.server.request_line import RequestLine, clipped
from proxy.server.services import SERVICES, Configured
from proxy.server.taps import ResponsesTap, left_after_end
from proxy.server.upstream import reading_answer, upstream_path
from proxy.settings import UpstreamSettings
from proxy.threads import tenant_digest

# A conversation's answer is its id, time and metadata (16 pairs at most): read up to this
# much for its id. A longer one is relayed all the same; the id leads, and the pattern
# `answer_id` looks for first finds it in the part read.
_MADE_ANSWER_LIMIT = 64 * 1024


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
    conf = services.configured  # the config in force now, for this request to its end
    threads = conf.settings.threads
    with RequestLine(services.log, services.metrics, "passthrough", path=request.path, method=request.method, passthrough=True,
                     tenant=tenant_digest(request.headers, threads.credential_headers)) as line:
        path = upstream_path(request.raw_path)
        if "websocket" in request.headers.get(hdrs.UPGRADE, "").lower():
            # `Upgrade` is hop-by-hop: forwarded without it, the handshake would reach the
            # upstream as a plain GET and come back as whatever it makes of one.
            raise NotImplementedHere(
                "The proxy does not relay WebSocket connections (the Realtime API, the "
                "Responses WebSocket): connect those to the upstream directly.",
                code="websocket_not_supported")
        upload = streamed_upload(request, conf.settings.server)
        body = b"" if upload is not None else await read_client_body(
            request, conf.settings.server.max_body_mb)
        tail = request.match_info["tail"]
        made_id, upstream = await _made_by(conf.origins, tail)
        model = ""
        if upstream is None:
            model = (model_of(body, request.content_type) or request.query.get("model", "")
                     or _path_model(tail))
            upstream = _route(conf, model, tail)
        line.set(model=clipped(model) or None, upstream=upstream.name,
                 bytes_in=len(body) if upload is None else upload,
                 routed_by="id" if made_id is not None else None)
        # A conversation made: its answer is read for its id, so asked for plain (it is small).
        makes = (conf.origins is not None and request.method == "POST"
                 and tail == "conversations")
        headers = upstream_request_headers(
            request.headers, api_key=upstream.api_key, identity_encoding=makes,
            drop=() if threads.forward_headers else threads.headers)
        if upload is not None:
            headers["Content-Length"] = str(upload)  # the upstream gets it sized, not chunked
        line.calling_upstream()
        try:
            response = await services.upstream.send(
                upstream, request.method, path, headers,
                request.content if upload is not None else body or None)
        finally:
            if upload is not None:  # what came, of what was announced: all of it, or less
                line.set(bytes_in=request.content.total_bytes)
        async with response:
            line.set(status=response.status)
            line.mark_upstream()
            out_headers = client_response_headers(response.headers)
            length = response.headers.get(hdrs.CONTENT_LENGTH)
            if length is not None:
                out_headers[hdrs.CONTENT_LENGTH] = length
            if (made_id is not None and request.method == "DELETE" and response.status == 200
                    and names_the_object(tail)):
                conf.origins.forget(made_id)  # type: ignore[union-attr]
            read: list[bytes] = []
            if makes and response.status == 200:
                read = await _answer_head(response, upstream)
                await conf.origins.conversation_made(  # type: ignore[union-attr]
                    upstream, _made_answer(read, response))
            tap = _tap_for(tail, response, length)
            # An event stream (a stored response read again with `stream=true`) is logged as
            # the pipeline's streams are: `stream` and the time to its first byte.
            events = is_event_stream(response)
            if events:
                line.set(stream=True)
            outcome = await relay_stream(
                request, response, out_headers, tap, line.started, read,
                left=lambda got: line.set(bytes_out=got.bytes_out, client_left_after_end=(
                    left_after_end(tap, got.bytes_out)),
                    ttfb_ms=got.first_byte_ms if events else None))
            line.set(bytes_out=outcome.bytes_out, upstream_error=outcome.upstream_error,
                     ttfb_ms=outcome.first_byte_ms if events else None)
            return outcome.response


def _made_answer(read: list[bytes], response: ClientResponse) -> bytes:
    """The answer's head, plain; b"" when it cannot be read (its conversation is then not
    remembered, and the answer goes as it came)."""
    try:
        return inflated(b"".join(read), answer_encoding(response.headers)) or b""
    except AnswerTooLarge:
        return b""


async def _answer_head(response: ClientResponse, upstream: UpstreamSettings) -> list[bytes]:
    """The chunks of an answer up to `_MADE_ANSWER_LIMIT` bytes (all of a small one), read
    before any is relayed: the relay sends them first."""
    chunks: list[bytes] = []
    size = 0
    with reading_answer(upstream):
        while size < _MADE_ANSWER_LIMIT:
            chunk = await response.content.readany()
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return chunks


def _tap_for(tail: str, response: ClientResponse, length: str | None) -> StreamTap:
    """A Responses tap for a response's event stream resumed by id (`GET /v1/responses/{id}
    ?stream=true`): one cut short then ends with an `error` event the client's SDK raises, as a
    stream made through the pipeline does. Any other answer is relayed byte for byte; so is
    one with a length, which an error frame added would contradict, and a compressed one (the
    client's `Accept-Encoding` goes up here), which the tap cannot read."""
    if (length is None and tail.startswith("responses/") and is_event_stream(response)
            and hdrs.CONTENT_ENCODING not in response.headers):
        return ResponsesTap(resumed=True)
    return PlainTap()


async def _made_by(origins: Origins | None,
                   tail: str) -> tuple[str | None, UpstreamSettings | None]:
    """The id the path is about and the upstream that made it, when the proxy saw it made."""
    made_id = scoped_id(tail) if origins is not None else None
    if made_id is None or origins is None:
        return None, None
    upstream = await origins.upstream_of(made_id)
    return (made_id, upstream) if upstream is not None else (None, None)


def _route(conf: Configured, model: str, tail: str) -> UpstreamSettings:
    try:
        return conf.route(model)
    except NotFound:
        about = None if model else scoped_id(tail)
        if about is None:
            raise
        raise NotFound(f"No upstream is known for {about!r}: this proxy did not relay its making "
                       "(made before a restart, by another instance, or long ago), and no route "
                       "matches requests without a model; add `{model: \"\", upstream: NAME}` "
                       "to `routes` to send them to the upstream that keeps them.",
                       code="model_not_found") from None


def _path_model(tail: str) -> str:
    """The model a `models/{model}` path names (an id may hold a slash: `org/model`); else ""."""
    return tail[7:] if tail.startswith("models/") else ""
