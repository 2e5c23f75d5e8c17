"""An upstream that stops reading a request body: `timeout_s` of it reading nothing is a 504,
on the pass-through paths (a streamed upload, a read body) and the pipeline's alike. aiohttp's
read timeout starts only once the whole body is written, so such a request (and a client's
upload behind it) waited for ever. A client that sends its upload slowly is not the upstream's
silence. Also here: what else a pass-through answer's relay keeps as it came (no
`Content-Type` added) and logs (an event stream's `stream` and `ttfb_ms`), and the proxy's own
answer to a WebSocket handshake."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from aiohttp import web

from tests.harness import LoopThread, serve_every_path
from tests.raw_http import header

MB = 1024 * 1024
SILENCE = {"upstreams": {"fake": {"timeout_s": 1}}}


@pytest.fixture
def deaf_upstream(loop_thread: LoopThread) -> Iterator[str]:
    """Accepts connections and never reads from them: a stuck upstream."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    async def start() -> asyncio.Server:
        return await asyncio.start_server(hold, "127.0.0.1", 0)

    server = loop_thread.run(start())
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    async def stop() -> None:
        for writer in held:
            writer.close()
        server.close()
    loop_thread.run(stop())


def _timed_post(url: str, content: bytes, content_type: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = httpx.post(url, content=content, timeout=30,
                        headers={"Content-Type": content_type, "Authorization": "Bearer sk-t"})
    return answer, time.monotonic() - started


def _assert_body_timeout(answer: httpx.Response, took: float) -> None:
    assert answer.status_code == 504, answer.text
    error = answer.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert "read none of the request body for 1s" in error["message"]
    assert took < 15


def test_a_streamed_upload_the_upstream_stops_reading_is_a_504(deaf_upstream, make_proxy) -> None:
    proxy = make_proxy(deaf_upstream, server={"max_body_mb": 1, "max_upload_mb": 64}, **SILENCE)
    content = bytes(range(256)) * (40 * MB // 256)
    answer, took = _timed_post(f"{proxy.base_url}/files", content, "application/octet-stream")
    _assert_body_timeout(answer, took)
    line = proxy.requests()[-1]
    # What came before the proxy gave up, not the length the client announced.
    assert line["status"] == 504 and 0 < line["bytes_in"] < len(content)


def test_a_read_body_the_upstream_stops_reading_is_a_504(deaf_upstream, make_proxy) -> None:
    proxy = make_proxy(deaf_upstream, **SILENCE)
    content = orjson.dumps({"model": "text-embedding-3-small", "input": ["x" * 1000] * 20_000})
    answer, took = _timed_post(f"{proxy.base_url}/embeddings", content, "application/json")
    _assert_body_timeout(answer, took)


def test_a_pipeline_request_the_upstream_stops_reading_is_a_504(deaf_upstream,
                                                                 make_proxy) -> None:
    proxy = make_proxy(deaf_upstream, models={"big-*": {"max_input_tokens": 50_000_000}},
                       **SILENCE)
    content = orjson.dumps({"model": "big-1", "messages": [
        {"role": "user", "content": "word " * (20 * MB // 5)}]})
    answer, took = _timed_post(f"{proxy.base_url}/chat/completions", content,
                               "application/json")
    _assert_body_timeout(answer, took)


@pytest.fixture
def reading_upstream(loop_thread: LoopThread) -> Iterator[str]:
    runners: list[web.AppRunner] = []

    async def read(request: web.Request) -> web.StreamResponse:
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
        return web.json_response({"bytes": size})

    yield f"http://127.0.0.1:{loop_thread.run(serve_every_path(read, runners))}/v1"
    for runner in runners:
        loop_thread.run(runner.cleanup())


def test_a_client_slower_than_the_timeout_is_not_the_upstreams_silence(reading_upstream,
                                                                       make_proxy) -> None:
    proxy = make_proxy(reading_upstream, server={"max_body_mb": 1, "max_upload_mb": 8},
                       **SILENCE)
    half = b"x" * (MB + MB // 2)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/uploads/upload_1/parts HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/octet-stream\r\n"
                     b"Content-Length: %d\r\n\r\n" % (2 * len(half)) + half)
        time.sleep(2.5)  # over timeout_s, waiting on the client
        sock.sendall(half)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        while len(body) < int(header(head, b"content-length") or 0):
            body += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), answer
    assert orjson.loads(body) == {"bytes": 2 * len(half)}


@pytest.fixture
def bare_upstream(loop_thread: LoopThread) -> Iterator[str]:
    """Answers every request with a body and no `Content-Type`, or an event stream."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if b"stream=true" in head.split(b"\r\n", 1)[0]:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Content-Length: 31\r\n\r\n"
                         b'event: x\ndata: {"a": 1}\n\n' + b"\n" * 6)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nbytes")
        await writer.drain()
        writer.close()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(answer, "127.0.0.1", 0)

    server = loop_thread.run(start())
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    loop_thread.run(_closed(server))


async def _closed(server: asyncio.Server) -> None:
    server.close()


def test_an_answer_without_a_content_type_is_relayed_without_one(bare_upstream,
                                                                 make_proxy) -> None:
    proxy = make_proxy(bare_upstream)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/files/file-1/content HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"bytes") and (chunk := sock.recv(65536)):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and body == b"bytes"
    assert header(head, b"content-type") is None


def test_a_pass_through_event_stream_is_logged_as_a_stream(bare_upstream, make_proxy) -> None:
    proxy = make_proxy(bare_upstream)
    answer = httpx.get(f"{proxy.base_url}/responses/resp_1?stream=true", timeout=10)
    assert answer.status_code == 200 and answer.headers["content-type"] == "text/event-stream"
    line = proxy.requests()[-1]
    assert line["stream"] is True and line["ttfb_ms"] >= 0
    plain = httpx.get(f"{proxy.base_url}/files/file-1/content", timeout=10)
    assert plain.status_code == 200
    assert "stream" not in proxy.requests()[-1] and "ttfb_ms" not in proxy.requests()[-1]


def test_a_websocket_handshake_gets_the_proxys_own_501(bare_upstream, make_proxy) -> None:
    proxy = make_proxy(bare_upstream)
    answer = httpx.get(f"{proxy.base_url}/realtime?model=gpt-realtime", timeout=10, headers={
        "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Authorization": "Bearer sk-t"})
    assert answer.status_code == 501
    error = answer.json()["error"]
    assert error["code"] == "websocket_not_supported" and "WebSocket" in error["message"]
    assert proxy.requests()[-1]["status"] == 501
