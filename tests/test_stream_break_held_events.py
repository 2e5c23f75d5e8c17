"""An upstream connection that breaks while the proxy still holds complete events it received:
those events reach the client before anything else happens. aiohttp's `readany` raises the
stored failure before the data it still buffers, so a relay held up by a slow client dropped up
to its whole buffer, the answer's end among them: the client got an error frame for an answer
that had come whole, and nothing anchored the next turn."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import aiohttp
import pytest

from proxy.conversation import Api
from proxy.errors import UpstreamUnavailable
from proxy.server.completions import _peek
from proxy.server.relay import Reads, held_after_failure
from tests.harness import LoopThread

USAGE = {"prompt_tokens": 60000, "completion_tokens": 2, "total_tokens": 60002}
EVENTS = 3000  # ~3 MB: more than the sockets and aiohttp's buffer hold for a client not reading


def _reader(loop: asyncio.AbstractEventLoop) -> aiohttp.StreamReader:
    return aiohttp.StreamReader(mock.Mock(), 2 ** 16, loop=loop)


async def _read_all(reader: aiohttp.StreamReader) -> tuple[list[bytes], BaseException | None]:
    reads: list[bytes] = []
    try:
        async for read in Reads(reader):
            reads.append(read)
    except aiohttp.ClientError as exc:
        return reads, exc
    return reads, None


def test_reads_give_what_is_held_before_the_failure() -> None:
    async def run() -> tuple[list[bytes], BaseException | None]:
        reader = _reader(asyncio.get_running_loop())
        reader.feed_data(b"data: 1\n\n")
        reader.feed_data(b"data: [DONE]\n\n")
        reader.set_exception(aiohttp.ClientPayloadError("connection lost"))
        return await _read_all(reader)

    reads, failure = asyncio.run(run())
    assert b"".join(reads) == b"data: 1\n\ndata: [DONE]\n\n"
    assert isinstance(failure, aiohttp.ClientPayloadError)


def test_an_aiohttp_without_the_private_read_loses_the_held_bytes_only() -> None:
    async def run() -> tuple[list[bytes], BaseException | None, bytes]:
        reader = _reader(asyncio.get_running_loop())
        reader.feed_data(b"data: 1\n\n")
        reader.set_exception(aiohttp.ClientPayloadError("connection lost"))
        with mock.patch.object(aiohttp.StreamReader, "_read_nowait", side_effect=AttributeError):
            return (*await _read_all(reader), held_after_failure(reader))

    reads, failure, held = asyncio.run(run())
    assert reads == [] and held == b"" and isinstance(failure, aiohttp.ClientPayloadError)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _answer() -> list[bytes]:
    usage = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
             "choices": [], "usage": USAGE}
    return [*(_chunk({"content": f"<{n:05d}>" + "x" * 1000}) for n in range(EVENTS)),
            _chunk({}, "stop"), b"data: " + json.dumps(usage).encode() + b"\n\n",
            b"data: [DONE]\n\n"]


async def _serve_then_break(events: list[bytes]) -> tuple[asyncio.Server, int]:
    """An upstream that answers every request with `events`, each in its own HTTP chunk, then
    closes its connection without the last chunk: the body breaks after the answer's end."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for event in events:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
def breaking_upstream(loop_thread: LoopThread) -> Iterator[Callable[[list[bytes]], str]]:
    servers: list[asyncio.Server] = []

    def make(events: list[bytes]) -> str:
        server, port = loop_thread.run(_serve_then_break(events))
        servers.append(server)
        return f"http://127.0.0.1:{port}/v1"

    yield make
    for server in servers:
        server.close()


def _slow_client(port: int) -> bytes:
    """A streamed chat request whose answer is read only 1.5 s after its first bytes."""
    body = json.dumps({"model": "gpt-4o", "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
                     b"Content-Type: application/json\r\nAuthorization: Bearer k\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        got = sock.recv(100)
        time.sleep(1.5)
        while chunk := sock.recv(1 << 20):
            got += chunk
    return got


def test_a_slow_client_gets_the_whole_answer_the_upstream_sent_before_breaking(
        make_proxy, breaking_upstream) -> None:
    proxy = make_proxy(breaking_upstream(_answer()), upstreams={"fake": {"timeout_s": 5}})
    got = _slow_client(proxy.port)
    assert got.count(b'"content":"<') == EVENTS and b'"finish_reason":"stop"' in got
    assert b"data: [DONE]\n\n" in got and b"upstream_disconnected" not in got
    assert b'"prompt_tokens"' not in got  # the usage chunk the client did not ask for
    line = proxy.requests()[-1]
    assert line["usage_input"] == 60000
    assert line["upstream_error"].endswith("after the answer's end")


def test_the_responses_peek_keeps_the_events_that_came_before_the_failure() -> None:
    """Held when the connection failed, a real event ends the peek, which relays what it read
    (the relay meets the failure next); lifecycle events alone are no answer: the failure is
    the client's 502 as before."""
    opening = b'event: response.created\ndata: {"type": "response.created"}\n\n'
    delta = b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta"}\n\n'
    upstream: Any = SimpleNamespace(name="fake", timeout_s=1.0)
    inbound: Any = SimpleNamespace(api=Api.RESPONSES)

    async def run(held: bytes) -> tuple[list[bytes], bytes | None]:
        reader = _reader(asyncio.get_running_loop())
        reader.feed_data(held)
        reader.set_exception(aiohttp.ClientPayloadError("connection lost"))
        response: Any = SimpleNamespace(content=reader)
        return await _peek(response, inbound, upstream)

    assert asyncio.run(run(opening + delta)) == ([opening + delta], None)
    with pytest.raises(UpstreamUnavailable, match="broke off"):
        asyncio.run(run(opening))
