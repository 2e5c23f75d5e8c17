"""`POST /v1/chat/completions` and `POST /v1/responses`: the handler, as a recipe of named steps.

Read and check the request, route it, find its thread, let the pipeline prepare the projection
(or answer itself), forward it, and relay the answer (streams as they come). A Responses request
that continues a stored response or a conversation goes to the upstream that holds it, when the
proxy saw it made (`proxy/server/origins.py`); any other by its model. An upstream
rejection that a second attempt can fix (context overflow, rejected private state) is retried
once, before any byte went to the client; then the pipeline records what the answer reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDict

from proxy.conversation import Api
from proxy.errors import UpstreamUnavailable
from proxy.inbound import Inbound, leading_bytes
from proxy.server.client_body import read_client_body
from proxy.server.headers import (bind_idempotency_keys, client_response_headers,
                                  upstream_request_headers)
from proxy.server.inflate import (AnswerTooLarge, Inflate, accepts, answer_encoding, inflated,
                                  inflater)
from proxy.server.origins import Origins, continued_id
from proxy.server.prepared import Prepared
from proxy.server.relay import (PlainTap, RelayOutcome, StreamTap, is_event_stream, read_any,
                                relay_stream, whole_response)
from proxy.server.request_line import RequestLine, clipped
from proxy.server.serving import log_unhandled
from proxy.server.services import Configured, Services
from proxy.server.shared_waits import anchor_written, usage_not_recorded
from proxy.server.taps import left_after_end
from proxy.server.upstream import answer_failed, reading_answer, upstream_path
from proxy.settings import UpstreamSettings
from proxy.sse import SseDecoder
from proxy.threads import (body_thread_hint, header_thread, loggable, resolve_thread,
                           tenant_digest)

_LIFECYCLE = frozenset({"response.created", "response.in_progress", "response.queued"})
_PEEK_LIMIT = 1 << 20
_PEEK_SECONDS = 1.0


def handler(services: Services,
            api: Api) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The route's handler for `api`: `_complete` given the application's services, which a
    request would otherwise find through three properties and a lookup of the application.
    A partial, not a coroutine that awaits `_complete`: one coroutine frame less, which every
    suspension of the request (the upstream's answer, its body) passes through twice."""
    return partial(_complete, services, api)


async def _complete(services: Services, api: Api, request: web.Request) -> web.StreamResponse:
    # The config in force now, for this request to its end (a reload replaces it whole).
    conf = services.configured
    tenant = tenant_digest(request.headers, conf.settings.threads.credential_headers)
    with RequestLine(services.log, services.metrics, str(api), path=request.path,
                     method=request.method, tenant=tenant) as line:
        path = upstream_path(request.raw_path)
        body = await read_client_body(request, conf.settings.server.max_body_mb)
        line.set(bytes_in=len(body))
        threads = conf.settings.threads
        named = header_thread(request.headers, threads, tenant)
        guess = named or body_thread_hint(body, threads, tenant)
        inbound = conf.pipeline.parse(api, body, guess)
        # Asked only with several upstreams, and of a request whose state lives upstream.
        held = (await _holder(conf.origins, inbound, line)
                if conf.origins is not None and inbound.stateful_upstream else None)
        upstream = held or conf.route(inbound.model)
        identity = named or resolve_thread(request.headers, inbound.doc, threads,
                                           lambda: leading_bytes(inbound), tenant)
        line.set(model=clipped(inbound.model), stream=inbound.stream, upstream=upstream.name,
                 thread=loggable(identity.thread), thread_source=identity.source)
        prepared = await conf.pipeline.prepare(inbound, identity, upstream, line,
                                               request.headers)
        while prepared.answer is None:
            outcome = await _forward(request, path, services, conf, prepared, line)
            # Tested as a Prepared (a plain class), not as a response: a response is a
            # MutableMapping, and `isinstance` against an ABC runs Python code.
            if not isinstance(outcome, Prepared):
                return outcome
            prepared = outcome
        line.set(status=prepared.answer.status)
        return prepared.answer


async def _holder(origins: Origins, inbound: Inbound,
                  line: RequestLine) -> UpstreamSettings | None:
    """The upstream holding the response or conversation `inbound` continues, when the proxy
    saw it made: its model's route may name another upstream, which would not know the id."""
    held_id = continued_id(inbound.doc)
    upstream = await origins.upstream_of(held_id) if held_id is not None else None
    if upstream is None or held_id is None:
        return None
    line.set(routed_by="id")
    if inbound.upstream_state == "conversation":
        await origins.conversation_used(held_id, upstream)
    return upstream


async def _forward(request: web.Request, path: str, services: Services, conf: Configured,
                   prepared: Prepared, line: RequestLine) -> web.StreamResponse | Prepared:
    """Send the projection; the client's response, or the next attempt when a retry helps."""
    settings, pipeline = conf.settings, conf.pipeline
    headers = upstream_request_headers(
        request.headers, api_key=prepared.upstream.api_key, identity_encoding=True,
        drop=() if settings.threads.forward_headers else settings.threads.headers)
    if prepared.body is not prepared.inbound.body:  # not the body the client's key was made for
        bind_idempotency_keys(headers, prepared.body)
    line.calling_upstream()
    response = await services.upstream.send(prepared.upstream, "POST", path, headers, prepared.body)
    async with response:
        line.set(status=response.status)
        line.mark_upstream()
        # None: plain, as the proxy asked (nearly always: the header is looked for in C first).
        encoding = (answer_encoding(response.headers)
                    if hdrs.CONTENT_ENCODING in response.headers else None)
        if is_event_stream(response) or _untyped_stream(prepared.inbound, response):
            peeked, error = await _peek(response, prepared.inbound, prepared.upstream, encoding)
            if error is not None:
                # An error event in a 200 stream is a rejection all the same.
                again = await pipeline.retry(prepared, 400, error, line)
                if again is not None:
                    return again
            out_headers = client_response_headers(response.headers, prepared.response_headers)
            tap = prepared.stream_tap()
            relayed, inflate = (tap, None) if encoding is None else \
                _encoded_stream(tap, encoding, out_headers)
            noted = _StreamNoted(request, conf.origins, prepared, tap)
            usage = _StreamUsage(services, pipeline, line, prepared, tap, response.status, noted)
            try:
                outcome = await relay_stream(
                    request, response, out_headers, relayed, line.started, peeked, usage.left,
                    noted.begun, usage.before_end if pipeline.store.shared else None, inflate)
                line.set(bytes_out=outcome.bytes_out, ttfb_ms=outcome.first_byte_ms,
                         upstream_error=outcome.upstream_error)
                # Before the wait below: a client that leaves during it had its answer whole.
                usage.record()
            finally:
                await noted.ended()
            return outcome.response
        try:  # `read_body`, inline: a coroutine less for every answer
            data = await response.read()
        except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
            raise answer_failed(prepared.upstream, exc) from None
        plain = data if encoding is None else _inflated_body(services, line, data, encoding)
        readable = b"" if plain is None else plain  # b"": nothing to read, relayed as it came
        if response.status >= 400:
            again = await pipeline.retry(prepared, response.status, readable, line)
            if again is not None:
                return again
        # Compressed against the proxy's wish: as it came to a client that accepts that
        # encoding, else plain (the proxy asked for identity on the client's behalf).
        unpacked = (encoding is not None and plain is not None
                    and not accepts(request.headers.get(hdrs.ACCEPT_ENCODING), encoding))
        sent = readable if unpacked else data
        line.set(bytes_out=len(sent))
        out = whole_response(response.status, response.reason, response.headers, sent,
                             prepared.response_headers)
        if unpacked:
            out.headers.popall(hdrs.CONTENT_ENCODING)
        shared = pipeline.store.shared
        if shared:  # recorded first: its anchor goes out in the origin's batch (below)
            _recorded(services, line, pipeline.finish_body, prepared, readable, response.status)
        # Where the answer was made is noted before the client has it: on a shared store the
        # next turn may reach another instance at once, and must find it there; so must its
        # anchor.
        if conf.origins is not None and response.status == 200:
            await _noted(request, conf.origins.answer_made(prepared, readable))
        if shared and response.status == 200:
            await anchor_written(pipeline.store, services.log, prepared, line)
        await out.prepare(request)
        await out.write_eof()
        if not shared:
            # The client has its answer before the proxy records what it reported. Nothing
            # below waits (the store queues its writes), so no other request runs in between:
            # the next turn, on any connection, still finds the anchor.
            _recorded(services, line, pipeline.finish_body, prepared, readable, response.status)
        return out


def _untyped_stream(inbound: Inbound, response: aiohttp.ClientResponse) -> bool:
    """A 2xx answer with a body to a `stream: true` request, typed neither as an event stream
    nor as JSON (no Content-Type, `text/plain`: some servers stream so): an event stream all
    the same. Read whole, it reached the client at its end, with the usage chunk the proxy
    asked for, and anchored nothing. It goes with its own type, or none (`relay._Untyped`)."""
    if not inbound.stream or response.status not in _STREAMED_STATUSES:
        return False
    content_type = response.headers.get(hdrs.CONTENT_TYPE)
    return content_type is None or "json" not in content_type.lower()


# 2xx with a body: 204 and 205 have none.
_STREAMED_STATUSES = frozenset({200, 201, 202, 203, 206, 207, 208, 226})


class _StreamNoted:
    """Which upstream made a streamed answer, noted as soon as its id is known: after the
    events a peek held back (a Responses stream's `response.created`), so it is in a shared
    store long before the answer ends; else (a chat stream) before its end goes out on a shared
    store (`_StreamUsage.before_end`), once the relay ended, however, on any."""

    def __init__(self, request: web.Request, origins: Origins | None, prepared: Prepared,
                 tap: StreamTap) -> None:
        self.request, self.origins, self.prepared, self.tap = request, origins, prepared, tap
        self.done = self.origins is None

    async def begun(self) -> None:
        stream = getattr(self.tap, "stream", None)
        if not self.done and getattr(stream, "id", None):
            await self.ended()

    async def ended(self) -> None:
        if not self.done and self.origins is not None:
            self.done = True
            await _noted(self.request, self.origins.stream_made(self.prepared, self.tap))


async def _noted(request: web.Request, noting: Awaitable[None]) -> None:
    """Which upstream made the answer, noted before the client has it all. A fault here is a
    proxy bug, logged; the answer stands, its connection kept: closing one whose answer went
    out whole would fail the client's next request sent on it meanwhile."""
    try:
        await noting
    except Exception:  # noqa: BLE001 - see above
        log_unhandled(request, after_answer=True)


def _inflated_body(services: Services, line: RequestLine, data: bytes,
                   encoding: str) -> bytes | None:
    """A compressed answer, inflated; one that inflates past any real answer's size is an
    answer the proxy cannot read, and the client's 502."""
    try:
        return inflated(data, encoding)
    except AnswerTooLarge as exc:
        services.log.warning("upstream_answer_too_large", encoding=encoding, bytes_in=len(data),
                             tenant=line.fields.get("tenant"), upstream=line.fields.get("upstream"))
        raise UpstreamUnavailable(f"The upstream's answer could not be read: {exc}",
                                  code=exc.error_code) from None


class _StreamUsage:
    """What a streamed answer reported, recorded once: when the relay ended, or the client left;
    on a shared store before the stream's last bytes go out (`before_end`)."""

    def __init__(self, services: Services, pipeline: Any, line: RequestLine, prepared: Prepared,
                 tap: StreamTap, status: int, noted: _StreamNoted) -> None:
        self.services, self.pipeline, self.line = services, pipeline, line
        self.prepared, self.tap, self.status, self.noted = prepared, tap, status, noted
        self.done = False

    def record(self) -> None:
        if not self.done:
            self.done = True
            _recorded(self.services, self.line, self.pipeline.finish_stream, self.prepared,
                      self.tap, self.status)

    def left(self, outcome: RelayOutcome) -> None:
        """What a client that left mid-stream had got: its 499 line says how far it read. The
        pipeline still reads the stream so far: a client may leave once it has the answer's
        last event (the sync SDK closes at `[DONE]`) while the upstream's body has not ended
        yet, and that whole answer anchors the next turn (one cut short does not:
        `finish_stream`). That client got the whole answer: its line keeps the upstream's
        status, and says it left."""
        self.line.set(bytes_out=outcome.bytes_out, ttfb_ms=outcome.first_byte_ms,
                      client_left_after_end=left_after_end(self.tap, outcome.bytes_out))
        self.record()

    async def before_end(self) -> None:
        """The answer came whole, its last bytes not yet relayed: on a shared store the next
        turn may reach another instance as soon as the client has them, so the anchor (and a
        chat stream's origin) go to the store first (`SHARED_WAIT_S` at most, together)."""
        self.record()  # queued before the origin: both go out in one batch as a rule
        await self.noted.ended()
        if self.status == 200:
            await anchor_written(self.pipeline.store, self.services.log, self.prepared,
                                 self.line)


def _encoded_stream(tap: StreamTap, encoding: str, headers: CIMultiDict[str]
                    ) -> tuple[StreamTap, Inflate | None]:
    """The tap for a stream compressed although the proxy asked for none, and what inflates
    its reads: `tap` reads it inflated and the client gets it plain; one the proxy cannot
    inflate goes as it came, unread (its usage is not recorded)."""
    inflate = inflater(encoding)
    if inflate is None:
        return PlainTap(), None
    headers.popall("Content-Encoding")
    return tap, inflate


def _recorded(services: Services, line: RequestLine,
              record: Callable[[Prepared, bytes | StreamTap, int, RequestLine], None],
              prepared: Prepared, answer: bytes | StreamTap, status: int) -> None:
    """`record` (the pipeline's `finish_body` or `finish_stream`) what an answer reported. The
    client has the answer already, or its stream so far (on a shared store, is about to have
    it): a failure here costs the next estimate its anchor, so it is logged, never the answer."""
    try:
        record(prepared, answer, status, line)
    except Exception as exc:  # noqa: BLE001 - whatever broke, the answer stands
        usage_not_recorded(services.log, line, exc)


async def _peek(response: aiohttp.ClientResponse, inbound: Inbound, upstream: UpstreamSettings,
                encoding: str | None = None) -> tuple[list[bytes], bytes | None]:
    """For Responses streams: read past the lifecycle events (and comments) to the first real one.

    Overflow and rejected private state arrive there as an `error` / `response.failed` event
    (PROTOCOL.md §6.3) after `response.created`: seen before anything is relayed, they can
    still be retried. Returns the chunks read and that event's data when it is an error. The
    client waits meanwhile, so the peek gives up after `_PEEK_SECONDS` (those errors come at
    once) or `_PEEK_LIMIT` bytes, and the relay goes on from there.
    """
    if inbound.api is not Api.RESPONSES:
        return [], None
    # Inflated on its own, from the first byte: the relay's tap inflates the same chunks again.
    inflate = None if encoding is None else inflater(encoding)
    if encoding is not None and inflate is None:
        return [], None  # an encoding the proxy cannot read: relayed unread
    decoder, chunks, size = SseDecoder(), [], 0
    deadline = asyncio.get_running_loop().time() + _PEEK_SECONDS
    with reading_answer(upstream):
        while size <= _PEEK_LIMIT:
            # What came before a failure is read first (`read_any`): a real event in it ends
            # the peek, and the relay meets the failure next; lifecycle events alone are no
            # answer, and the failure is the client's 502 or 504 as before.
            chunk = await _read_until(response, deadline)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            for event in decoder.feed(chunk if inflate is None else inflate(chunk)):
                if event.data_bytes is None:
                    continue  # a keep-alive comment, or a block no reader dispatches
                data = event.json()
                kind = data.get("type") if isinstance(data, dict) else event.event
                if kind in _LIFECYCLE:
                    continue
                failed = kind in ("error", "response.failed")
                return chunks, (event.data or "").encode() if failed else None
    return chunks, None


async def _read_until(response: aiohttp.ClientResponse, deadline: float) -> bytes:
    """The next chunk, or b"" at the end of the stream or when `deadline` passed (nothing is
    lost: a chunk that comes later stays in the response's buffer for the relay)."""
    limit = asyncio.timeout_at(deadline)
    try:
        async with limit:
            return await read_any(response.content)
    except TimeoutError:
        if limit.expired():
            return b""
        raise

