"""A streamed answer the upstream sends without `Content-Type: text/event-stream` (none at all,
or `text/plain`, as some servers do) to a `stream: true` request is relayed as a stream: event
by event, the usage chunk the client did not ask for hidden, its usage anchoring the next turn,
and with the upstream's own type (none stays none, not aiohttp's `application/octet-stream`).
An answer typed as JSON is a body, read whole as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.harness import LoopThread

USAGE = {"prompt_tokens": 60000, "completion_tokens": 2, "total_tokens": 60002}
RELEASE_S = 3.0  # how long the upstream waits for the client to have the first event


def _chunk(choices: list[Any], usage: Any = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
            "choices": choices, "usage": usage}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


FIRST = _chunk([{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}])
REST = [_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]), _chunk([], USAGE),
        b"data: [DONE]\n\n"]


class _Upstream:
    """Streams FIRST, waits for the test's word (RELEASE_S at most), then the rest."""

    def __init__(self, content_type: str | None) -> None:
        self.content_type = content_type
        self.release = asyncio.Event()
        self.released = False  # the word came before RELEASE_S passed

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
        typed = "" if self.content_type is None else f"Content-Type: {self.content_type}\r\n"
        writer.write(f"HTTP/1.1 200 OK\r\nConnection: close\r\n{typed}"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        writer.write(b"%x\r\n%s\r\n" % (len(FIRST), FIRST))
        await writer.drain()
        try:
            await asyncio.wait_for(self.release.wait(), RELEASE_S)
            self.released = True
        except TimeoutError:
            pass
        for event in REST:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()


@pytest.fixture
def typed_upstream(loop_thread: LoopThread
                   ) -> Iterator[Callable[[str | None], tuple[_Upstream, str]]]:
    servers: list[asyncio.Server] = []

    def make(content_type: str | None) -> tuple[_Upstream, str]:
        upstream = _Upstream(content_type)

        async def start() -> int:
            server = await asyncio.start_server(upstream.answer, "127.0.0.1", 0)
            servers.append(server)
            return server.sockets[0].getsockname()[1]

        return upstream, f"http://127.0.0.1:{loop_thread.run(start())}/v1"

    yield make
    for server in servers:
        server.close()


async def _set(event: asyncio.Event) -> None:
    event.set()


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain; charset=utf-8"])
def test_an_untyped_stream_is_relayed_as_a_stream(loop_thread: LoopThread, make_proxy,
                                                  typed_upstream,
                                                  content_type: str | None) -> None:
    upstream, url = typed_upstream(content_type)
    proxy = make_proxy(url)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": "gpt-4o", "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]}) as answer:
        reads = answer.iter_raw()
        got = next(reads)  # the first event, while the upstream holds the rest back
        loop_thread.run(_set(upstream.release))
        got += b"".join(reads)
        assert answer.headers.get("content-type") == content_type
    assert upstream.released  # the client had the first event before the answer's end
    assert got == FIRST.replace(b',"usage":null', b"") + b"".join(
        event.replace(b',"usage":null', b"") for event in REST if b'"choices":[]' not in event)
    assert proxy.requests()[-1]["usage_input"] == 60000


def test_a_json_answer_to_a_streamed_request_is_still_a_body(loop_thread: LoopThread,
                                                            make_proxy, typed_upstream) -> None:
    # Typed as JSON, what comes is a body (an error, or a server that does not stream): read
    # whole, as before. (This one is an event stream mistyped: relayed as it came.)
    upstream, url = typed_upstream("application/json")
    loop_thread.run(_set(upstream.release))
    proxy = make_proxy(url)
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                        json={"model": "gpt-4o", "stream": True,
                              "messages": [{"role": "user", "content": "hi"}]})
    assert answer.headers["content-type"] == "application/json"
    assert answer.content == FIRST + b"".join(REST)
