"""Relaying upstream answers to the client: bodies whole, event streams chunk by chunk.

A stream is written as it arrives; a `StreamTap` sees every chunk and decides what reaches the
client (everything, for a plain relay; all but a hidden usage chunk, for the pipeline) while it
reads usage on the side. An upstream that dies mid-stream leaves the client with a final error
frame in the API's own event format, so SDKs raise instead of hanging or silently truncating
(none once the answer came to its end: the client has it whole); so does a Responses stream
whose body ends cleanly before its terminal event (`ended_early`).
A plain relay, which knows no such format, closes the client's connection instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.errors import ShuttingDown
from proxy.server.drain import CUT_MESSAGE, cut_reason, is_cut, resume_after_cut
from proxy.server.headers import for_client
from proxy.server.upstream import describe


class StreamTap(Protocol):
    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes: ...

    def cut_inside_line(self) -> bool: ...

    def ended_early(self) -> bool: ...

    @property
    def complete(self) -> bool: ...  # the answer came to its end (and not as an error)

    @property
    def over(self) -> bool: ...  # the stream said its last event (the end, or a failure)


class PlainTap:
    """Forwards every byte as it comes; knows no event format (used for pass-through)."""

    def feed(self, chunk: bytes) -> bytes:
        return chunk

    def flush(self) -> bytes:
        return b""

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes:
        return b""

    def cut_inside_line(self) -> bool:
        return False

    def ended_early(self) -> bool:
        return False

    @property
    def complete(self) -> bool:
        return False

    @property
    def over(self) -> bool:
        return False


@dataclass
class RelayOutcome:
    response: web.StreamResponse
    bytes_out: int = 0
    first_byte_ms: float | None = None
    upstream_error: str | None = None


def is_event_stream(response: aiohttp.ClientResponse) -> bool:
    return _is_event_stream_type(response.headers.get(hdrs.CONTENT_TYPE, ""))


# A read holds all the stream has buffered: thousands of events when the upstream writes faster
# than the loop reads (a long answer of small chunks), each decoded and parsed by the tap. Fed
# whole, one read held the loop some 40 ms; a slice is a few hundred events at most.
READ_SLICE = 16 * 1024


def _slices(read: bytes) -> list[bytes]:
    return [read[k:k + READ_SLICE] for k in range(0, len(read), READ_SLICE)]


# An upstream sends the same few Content-Type values on every answer.
@lru_cache(maxsize=64)
def _is_event_stream_type(content_type: str) -> bool:
    # A media type is case-insensitive (RFC 9110 §8.3.1): `Text/Event-Stream` streams too.
    return content_type.partition(";")[0].strip().lower() == "text/event-stream"


async def relay_stream(request: web.Request, upstream: aiohttp.ClientResponse,
                       headers: CIMultiDict[str], tap: StreamTap, started: float,
                       already_read: Sequence[bytes] = (),
                       left: Callable[[RelayOutcome], object] | None = None,
                       begun: Callable[[], Awaitable[None]] | None = None,
                       ending: Callable[[], Awaitable[None]] | None = None,
                       decode: Callable[[bytes], bytes] | None = None) -> RelayOutcome:
    """Relay `already_read` (chunks a peek consumed), then the rest as it arrives; `begun` is
    awaited once those went out (the tap has read them), before the rest is read; `ending`
    once the tap has read the answer's end (`complete`), before the bytes that hold it go out.
    `decode` (an inflater, for a stream compressed against the proxy's asking) turns each read
    into what the tap reads, before it is sliced: a few KB compressed may be MBs of events.

    The caller returns `outcome.response` from its handler unfinished; aiohttp ends it. A
    client that leaves mid-way raises out of here; `left` is first told what it got so far.
    """
    kind = web.StreamResponse if hdrs.CONTENT_TYPE in headers else _Untyped
    out = kind(status=upstream.status, reason=upstream.reason, headers=headers)
    outcome = RelayOutcome(out)
    await out.prepare(request)
    try:
        if decode is not None:
            already_read = list(map(decode, already_read))
        data = b"".join(map(tap.feed, already_read))  # held back by a peek: sent at once
        if ending is not None and tap.complete:
            await ending()
            ending = None
        if data:
            await out.write(data)
            _sent(outcome, data, started)
        if begun is not None:
            await begun()
        # Written inline, not by a helper coroutine: a real stream comes an event per read,
        # and a coroutine made and awaited per event costs as much as its bookkeeping.
        async for read in Reads(upstream.content):
            if decode is not None:
                read = decode(read)
            sliced = len(read) > READ_SLICE
            for chunk in _slices(read) if sliced else (read,):
                data = tap.feed(chunk)
                if ending is not None and tap.complete:
                    await ending()
                    ending = None
                if data:
                    await out.write(data)
                    _sent(outcome, data, started)
                if sliced:  # the loop serves the others between two slices
                    await asyncio.sleep(0)
        if tap.cut_inside_line():
            # A body that ended cleanly, but inside an event: the answer is cut short all the
            # same, and an SDK would take the events before the cut for the whole answer.
            outcome.upstream_error = "upstream ended the stream inside an event"
            data = tap.failure_frame("The upstream ended the stream mid-stream, inside an "
                                     "event: the answer is incomplete.")
        else:
            data = tap.flush()
            if upstream.status == 200 and tap.ended_early():
                # Between events, but before the answer's last one: cut short all the same.
                # (An error status tells the client already; its body goes as it came.)
                outcome.upstream_error = "upstream ended the stream before its last event"
                data += _after_last_line(data) + tap.failure_frame(
                    "The upstream ended the stream before its last event: the answer is "
                    "incomplete.")
        if ending is not None and tap.complete:  # its end came with the body's (no `[DONE]`)
            await ending()
    except ConnectionResetError:
        # aiohttp's write to a client connection that is closing (a ClientError as well): the
        # client left before aiohttp cancelled the handler; the upstream did nothing wrong.
        if left is not None:
            left(outcome)
        raise
    except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
        outcome.upstream_error = describe(exc) if not isinstance(exc, asyncio.TimeoutError) \
            else "upstream stopped sending (read timeout)"
        # What the tap still holds is an unfinished event: relayed, the error frame would
        # continue its line and the client's SDK would miss the error or fail to parse it.
        data = _failure(tap, outcome,
                        f"The upstream connection failed mid-stream: {outcome.upstream_error}")
    except asyncio.CancelledError as exc:
        if not is_cut(exc):
            if left is not None:
                left(outcome)  # the client left
            raise
        # The shutdown grace ended: the stream ends here, properly, with an error frame.
        resume_after_cut()
        outcome.upstream_error = cut_reason(exc)
        data = _failure(tap, outcome, CUT_MESSAGE, ShuttingDown.code)  # as above
    if data:
        await out.write(data)
        outcome.bytes_out += len(data)
    elif outcome.upstream_error is not None and not tap.over:
        _break_off(request)
    # No write_eof here: aiohttp ends the response once the handler returns, so the anchor and
    # the request's log line are written before the client can see the stream end.
    return outcome


def _failure(tap: StreamTap, outcome: RelayOutcome, message: str,
             code: str = "upstream_disconnected") -> bytes:
    """The error frame that ends a stream broken off; nothing once the stream said its last
    event: the client has the whole answer, and an SDK that reads a stream to its end
    (Responses) would raise on an error event after `response.completed`; after its failure
    (`response.failed`, an error frame) a second error would say it twice."""
    if not tap.over:
        return tap.failure_frame(message, code)
    after = "the answer's end" if tap.complete else "the stream's failure"
    outcome.upstream_error = f"{outcome.upstream_error}, after {after}"
    return b""


def _after_last_line(flushed: bytes) -> bytes:
    """What ends the event `flushed` holds (the last one, which came without its blank line):
    an error frame written right after it would be read as more lines of that event."""
    if not flushed or flushed.endswith((b"\n\n", b"\r\r", b"\r\n\r\n")):
        return b""
    # After a lone CR, a first LF would make a CRLF (one line end): two end a line in any case,
    # and an extra blank line is an empty event, which SSE readers skip.
    return b"\n\n"


def _break_off(request: web.Request) -> None:
    """End a cut body the only way a plain relay can tell the client: by closing the
    connection. A clean end would pass the part for the whole (chunked), and an unmet
    Content-Length would leave the client waiting, then reading the next answer as the rest."""
    if request.transport is not None:
        request.transport.close()  # aiohttp's final write then fails: no last chunk follows


class Reads:
    """`content.iter_any()`, but what the upstream sent before its connection failed comes
    first: aiohttp's `readany` raises the failure before the data it still holds (a relay held
    up by a slow client may hold megabytes, the answer's end among them). The failure is raised
    once that is read. No dearer than `iter_any`: the same coroutine per read."""

    __slots__ = ("content",)

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self.content = content

    def __aiter__(self) -> Reads:
        return self

    async def __anext__(self) -> bytes:
        try:
            read = await self.content.readany()
        except (asyncio.TimeoutError, aiohttp.ClientError):
            read = held_after_failure(self.content)
            if not read:
                raise
        if not read:
            raise StopAsyncIteration
        return read


async def read_any(content: aiohttp.StreamReader) -> bytes:
    """`content.readany()` as `Reads` reads it: b"" at the end (for the Responses peek)."""
    return await anext(Reads(content), b"")


def held_after_failure(content: aiohttp.StreamReader) -> bytes:
    """What `content` still holds once its connection failed. aiohttp has no public way to read
    it (`read_nowait` raises the failure too): its private `_read_nowait` (aiohttp 3.x) is used,
    guarded, so an aiohttp without it, or one that fails there, loses those bytes as before."""
    try:
        held = content._read_nowait(-1)
    except Exception:  # noqa: BLE001 - see above
        return b""
    return held if isinstance(held, bytes) else b""


class _Untyped(web.StreamResponse):
    """An answer the upstream sent without a `Content-Type`: relayed without one too. (aiohttp
    gives a response with a body `application/octet-stream`, which a client would then trust.)"""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self._headers.popall(hdrs.CONTENT_TYPE, None)


def _sent(outcome: RelayOutcome, data: bytes, started: float) -> None:
    outcome.bytes_out += len(data)
    if outcome.first_byte_ms is None:
        outcome.first_byte_ms = round((time.perf_counter() - started) * 1000, 2)


def whole_response(status: int, reason: str | None,
                   upstream_headers: Mapping[str, str] | CIMultiDictProxy[str], body: bytes,
                   extra: Mapping[str, str] | None = None) -> web.Response:
    """The client's answer: `body`, with the upstream's headers made `client_response_headers`
    once the response has its own copy of them (aiohttp copies what it is given)."""
    out = web.Response(status=status, reason=reason, headers=upstream_headers, body=body)
    for_client(out.headers, upstream_headers, extra)
    return out
