"""Sending the fake's answers over HTTP, including the ways real upstreams fail mid-answer.

A stream is a list of ready SSE frames; the reply decides whether it is sent whole, cut off by
an aborted TCP connection after N frames, ended by an error frame after N frames, or left
hanging after N frames until the fake stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from proxy import jsonio
from proxy.testing.rejections import Rejection
from proxy.testing.replies import Reply

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"


def data_frame(payload: Any) -> bytes:
    return b"data: " + jsonio.dumps(payload) + b"\n\n"


def event_frame(kind: str, payload: Mapping[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\n" + data_frame(payload)


def reject(rejection: Rejection, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=rejection.status, body=rejection.to_bytes(),
                        content_type="application/json", headers=headers)


# Paths of streams whose peer went away while the fake was still holding them open.
PEER_GONE = web.AppKey("peer_gone", list)


async def abort(request: web.Request) -> None:
    """Drop the TCP connection once what was written has left, as a crashed upstream would."""
    transport = request.transport
    if transport is None:
        return
    for _ in range(50):
        if transport.get_write_buffer_size() == 0:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.02)  # let the peer read the last frames before the reset
    transport.abort()


async def send_stream(request: web.Request, frames: Sequence[bytes], reply: Reply,
                      error_frame: bytes | None, stopping: asyncio.Event, delay: float = 0.0,
                      headers: Mapping[str, str] | None = None) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(headers or {})})
    await response.prepare(request)
    cut = _cut_point(reply, len(frames))
    for frame in frames[:cut]:
        await response.write(frame)
        if delay:
            await asyncio.sleep(delay)
    if reply.die_after is not None:
        await abort(request)
        return response
    if reply.hang_after is not None:
        if await _peer_left(request, stopping):
            request.app[PEER_GONE].append(request.path)
        await abort(request)
        return response
    if reply.error_after is not None and error_frame is not None:
        await response.write(error_frame)
    await response.write_eof()
    return response


async def _peer_left(request: web.Request, stopping: asyncio.Event) -> bool:
    """Wait until the server stops or the peer closes the connection; True for the latter."""
    while not stopping.is_set():
        transport = request.transport
        if transport is None or transport.is_closing():
            return True
        try:
            await asyncio.wait_for(stopping.wait(), 0.02)
        except asyncio.TimeoutError:
            pass
    return False


def _cut_point(reply: Reply, count: int) -> int:
    for after in (reply.die_after, reply.hang_after, reply.error_after):
        if after is not None:
            return min(after, count)
    return count


async def send_failure(request: web.Request, reply: Reply, stopping: asyncio.Event,
                       error_body: Any) -> web.StreamResponse | None:
    """A non-streamed request meeting a failing reply: no answer, a reset, or a 500."""
    if reply.hang_after is not None:
        await stopping.wait()
        await abort(request)
        return web.Response(status=500)
    if reply.die_after is not None:
        await abort(request)
        return web.Response(status=500)
    if reply.error_after is not None:
        return reject(Rejection(500, error_body))
    return None
