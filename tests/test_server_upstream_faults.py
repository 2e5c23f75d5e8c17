"""The HTTP edges a transparent proxy must keep: an upstream body that breaks off on a
pass-through path, upstream answers compressed although the proxy asked for none, and headers
aiohttp would add to what the client sent."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
import zlib
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.test_server_wire_edges import CHAT, make_upstream  # noqa: F401 - the fixture


def _broken_body(chunked: bool):
    """An upstream that promises a 1,000-byte file (by length or chunked) and dies at 500."""
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if chunked:
            out.enable_chunked_encoding()
        else:
            out.content_length = 1000
        await out.prepare(request)
        await out.write(b"a" * 500)
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        return out
    return answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_pass_through_body_that_breaks_off_reaches_the_client_broken(make_upstream,  # noqa: F811
                                                                        make_proxy,
                                                                        chunked) -> None:
    proxy = make_proxy(make_upstream(_broken_body(chunked)).url)
    # A clean end would pass half a file for the whole; a length left unmet would keep the
    # client waiting, then take the next answer on the connection for the rest.
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(f"{proxy.base_url}/files/file-1/content", timeout=5)
    line = proxy.requests()[-1]
    assert line["status"] == 200 and "not completed" in line["upstream_error"]


def test_a_connection_whose_answer_broke_off_is_not_reused(make_upstream,  # noqa: F811
                                                           make_proxy) -> None:
    proxy = make_proxy(make_upstream(_broken_body(chunked=False)).url)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
        client.sendall(b"GET /v1/files/file-1/content HTTP/1.1\r\nHost: proxy\r\n\r\n")
        received = client.recv(65536)
        client.sendall(b"GET /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n")
        while chunk := client.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"Content-Length: 1000" in head and body == b"a" * 500


def _chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}


_USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
_CHAT_STREAM = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in (
    _chat_chunk({"role": "assistant", "content": "Hel"}), _chat_chunk({"content": "lo"}, "stop"),
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
     "choices": [], "usage": _USAGE})) + b"data: [DONE]\n\n"
_CHAT_BODY = json.dumps({
    "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                 "finish_reason": "stop"}], "usage": _USAGE}).encode()


def _compress(data: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    deflate = zlib.compressobj(wbits=-15)  # "deflate" as many servers send it: no zlib header
    return deflate.compress(data) + deflate.flush()


def _compressing(encoding: str, pieces: int = 7):
    """An upstream that compresses its answers whatever the request's Accept-Encoding says, and
    sends a stream in several reads."""
    async def answer(request: web.Request) -> web.StreamResponse:
        stream = (await request.json()).get("stream")
        data = _compress(_CHAT_STREAM if stream else _CHAT_BODY, encoding)
        label = "deflate" if encoding == "raw-deflate" else encoding
        out = web.StreamResponse(headers={
            "Content-Encoding": label,
            "Content-Type": "text/event-stream" if stream else "application/json"})
        await out.prepare(request)
        step = len(data) // pieces + 1
        for start in range(0, len(data), step):
            await out.write(data[start:start + step])
            await asyncio.sleep(0.01)
        return out
    return answer


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_a_stream_compressed_against_the_proxys_wish_is_read_and_relayed_plain(
        make_upstream, make_proxy, encoding) -> None:  # noqa: F811
    upstream = make_upstream(_compressing(encoding))
    proxy = make_proxy(upstream.url)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={**CHAT, "stream": True}) as answer:
        headers, raw = answer.headers, answer.read()
    assert upstream.seen[-1][2]["accept-encoding"] == "identity"
    assert "content-encoding" not in headers
    # The client did not ask for usage: the chunk the proxy asked for is hidden.
    assert raw == _CHAT_STREAM.replace(b', "usage": null', b"").replace(
        b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1,
                                "model": "gpt-4o", "choices": [], "usage": _USAGE}).encode()
        + b"\n\n", b"")
    line = proxy.requests()[-1]
    assert "upstream_error" not in line and line["usage_input"] == 11


@pytest.mark.parametrize("encoding", ["gzip", "raw-deflate"])
def test_a_body_compressed_against_the_proxys_wish_is_relayed_as_it_came_and_read(
        make_upstream, make_proxy, encoding) -> None:  # noqa: F811
    proxy = make_proxy(make_upstream(_compressing(encoding)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    completion = client.chat.completions.create(**CHAT)
    client.close()
    assert completion.choices[0].message.content == "Hello"
    assert proxy.requests()[-1]["usage_input"] == 11  # the next turn's anchor


def test_a_stream_in_an_encoding_the_proxy_cannot_inflate_is_relayed_as_it_came(
        make_upstream, make_proxy) -> None:  # noqa: F811
    opaque = bytes(range(256)) * 40  # no blank line the relay could take for an event's end

    async def answer(request: web.Request) -> web.StreamResponse:
        # LZW (`compress`): no library the proxy has reads it.
        out = web.StreamResponse(headers={"Content-Encoding": "compress",
                                          "Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(opaque)
        return out

    proxy = make_proxy(make_upstream(answer).url)
    for path, body in (("/chat/completions", {**CHAT, "stream": True}),
                       ("/responses", {"model": "gpt-4o", "input": "hi", "stream": True})):
        with httpx.stream("POST", f"{proxy.base_url}{path}", json=body, timeout=20,
                          headers={"Accept-Encoding": "compress"}) as answer_:
            assert answer_.headers["content-encoding"] == "compress"
            assert b"".join(answer_.iter_raw()) == opaque
        assert "upstream_error" not in proxy.requests()[-1]


def test_a_responses_error_event_compressed_is_still_seen_before_the_relay(
        make_upstream, make_proxy) -> None:  # noqa: F811
    error = {"type": "error", "sequence_number": 1, "error": {
        "type": "invalid_request_error", "code": "invalid_encrypted_content",
        "message": "The encrypted content could not be verified.", "param": None}}
    seen: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(1)
        out = web.StreamResponse(headers={"Content-Encoding": "gzip",
                                          "Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(gzip.compress(
            b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
            b'"response":{"id":"r","status":"in_progress"}}\n\n'
            b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"))
        return out

    proxy = make_proxy(make_upstream(answer).url)
    items = [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "blob"},
             {"type": "message", "role": "user", "content": "hi"}]
    with httpx.stream("POST", f"{proxy.base_url}/responses", timeout=20,
                      json={"model": "gpt-4o", "input": items, "stream": True}) as answer_:
        answer_.read()
    assert proxy.requests()[-1].get("retried") == "encrypted reasoning rejected"
    assert len(seen) == 2


def test_a_summary_compressed_against_the_proxys_wish_is_read(make_upstream,  # noqa: F811
                                                              loop_thread) -> None:
    from proxy.server.summarizer_client import run_summary
    from proxy.server.upstream import UpstreamClient
    from tests.harness import proxy_settings
    from tests.test_compaction_summarizer import chat_session, plan_for

    async def answer(request: web.Request) -> web.StreamResponse:
        reply = json.loads(_CHAT_BODY)
        reply["choices"][0]["message"]["content"] = "The user refactors src/app.py."
        return web.Response(body=gzip.compress(json.dumps(reply).encode()),
                            headers={"Content-Encoding": "gzip",
                                     "Content-Type": "application/json"})

    upstream = proxy_settings(make_upstream(answer).url, "unused").upstreams["fake"]

    async def summarize() -> str | None:
        client = UpstreamClient(2)
        await client.start()
        try:
            outcome = await run_summary(plan_for(*chat_session()), upstream, client, {}, 10)
        finally:
            await client.close()
        return outcome.text

    assert loop_thread.run(summarize()) == "The user refactors src/app.py."


@pytest.mark.parametrize("head, body", [
    (b"GET /v1/models HTTP/1.1\r\n", b""),
    (b"POST /v1/batches/batch_1/cancel HTTP/1.1\r\nContent-Length: 0\r\n", b""),
    (b"POST /v1/embeddings HTTP/1.1\r\nContent-Length: 2\r\n", b"{}"),
], ids=["get", "empty-post", "post"])
def test_aiohttp_adds_no_accept_or_content_type_of_its_own(make_upstream, make_proxy,  # noqa: F811
                                                           head, body) -> None:
    async def ok(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": []})

    upstream = make_upstream(ok)
    proxy = make_proxy(upstream.url)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as client:
        client.sendall(head + b"Host: proxy\r\nConnection: close\r\n\r\n" + body)
        while client.recv(65536):
            pass
    seen = upstream.seen[-1][2]
    assert "accept" not in seen and "content-type" not in seen


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/files"])
@pytest.mark.parametrize("expect", [True, False], ids=["expect-continue", "no-expect"])
def test_a_body_announced_over_the_limit_is_413_before_any_of_it_is_sent(make_proxy, fake,
                                                                         path, expect) -> None:
    proxy = make_proxy(fake, server={"max_body_mb": 1})
    head = (f"POST {path} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
            f"Content-Length: {50 * 1024 * 1024}\r\n"
            + ("Expect: 100-continue\r\n" if expect else "") + "\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
        client.sendall(head)  # and nothing more: the client waits for the proxy's word
        first = client.recv(65536)
    assert first.startswith(b"HTTP/1.1 413 "), first[:40]
    assert b"Connection: close" in first and b'"request_too_large"' in first
    assert fake.requests == []
    line = proxy.requests()[-1]
    assert (line["status"], line["error"]) == (413, "request_too_large")


def test_a_compressed_body_is_measured_inflated_not_by_its_length(make_proxy, fake) -> None:
    proxy = make_proxy(fake, server={"max_body_mb": 1})
    body = json.dumps({**CHAT, "user": "x" * (2 * 1024 * 1024)}).encode()
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=gzip.compress(body),
                        headers={"Content-Type": "application/json",
                                 "Content-Encoding": "gzip"}, timeout=20)
    assert answer.status_code == 413 and fake.requests == []


class _Body:
    """An upstream answer's body, read by read."""

    def __init__(self, *reads: bytes) -> None:
        self._reads = reads

    async def readany(self) -> bytes:
        read, self._reads = (self._reads[0], self._reads[1:]) if self._reads else (b"", ())
        return read


@pytest.mark.parametrize("tap", ["plain", "chat"])
async def test_a_client_gone_mid_relay_is_not_taken_for_an_upstream_failure(tap) -> None:
    from unittest import mock

    from aiohttp import ClientConnectionResetError
    from aiohttp.test_utils import make_mocked_request
    from multidict import CIMultiDict

    from proxy.server.relay import PlainTap, relay_stream
    from proxy.server.taps import ChatTap

    # aiohttp raises this (a ClientError too) on a write to a connection that is closing
    # before it has cancelled the handler: the client left, the upstream is fine.
    writer = mock.Mock(write_headers=mock.AsyncMock(), drain=mock.AsyncMock(),
                       write=mock.AsyncMock(side_effect=ClientConnectionResetError("closing")))
    request = make_mocked_request("GET", "/v1/files/f/content", writer=writer)
    upstream = mock.Mock(status=200, reason="OK", content=_Body(b"data: {}\n\n", b"more"))
    with pytest.raises(ConnectionResetError):
        await relay_stream(request, upstream, CIMultiDict(),
                           PlainTap() if tap == "plain" else ChatTap(False), 0.0)


@pytest.mark.parametrize("path", ["/models", "/chat/completions"])
def test_an_upstream_header_line_as_long_as_a_clients_may_be_is_relayed(make_upstream,  # noqa: F811
                                                                         make_proxy,
                                                                         path) -> None:
    # The proxy takes header lines up to 64 KiB from its clients; an upstream's answer gets
    # the same room (aiohttp's client would refuse lines over 8 KiB: a 502).
    cookie = "session=" + "v" * 20_000

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": []}, headers={"Set-Cookie": cookie})

    proxy = make_proxy(make_upstream(answer).url)
    sent = httpx.request("GET" if path == "/models" else "POST", f"{proxy.base_url}{path}",
                         json=None if path == "/models" else CHAT, timeout=20)
    assert sent.status_code == 200 and sent.headers["set-cookie"] == cookie


def test_a_stream_whose_done_has_no_line_end_is_not_taken_for_a_cut(make_upstream,  # noqa: F811
                                                                    make_proxy) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_CHAT_STREAM.removesuffix(b"\n\n"))  # `data: [DONE]`, and the end
        return out

    proxy = make_proxy(make_upstream(answer).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(**CHAT, stream=True))
    client.close()
    assert [c.choices[0].delta.content for c in chunks] == ["Hel", "lo"]
    line = proxy.requests()[-1]
    assert "upstream_error" not in line and line["usage_input"] == 11


def test_no_connection_within_connect_timeout_is_502_saying_so(make_upstream,  # noqa: F811
                                                               make_proxy, loop_thread) -> None:
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-hold"):
            await asyncio.wait_for(release.wait(), 10)
        return web.json_response({"object": "list", "data": []})

    # The pool's one connection is taken: the next request gets none within connect_timeout_s
    # (as when the upstream does not accept one). Not "no answer within timeout_s (600 s)".
    upstream = make_upstream(answer)
    proxy = make_proxy(upstream.url, server={"upstream_pool_size": 1},
                       upstreams={"fake": {"connect_timeout_s": 0.3, "timeout_s": 600}})
    held = threading.Thread(target=httpx.get, args=(f"{proxy.base_url}/models",),
                            kwargs={"headers": {"x-hold": "1"}, "timeout": 20})
    held.start()
    try:
        while not upstream.seen:  # the held request has the connection
            time.sleep(0.01)
        answer_ = httpx.get(f"{proxy.base_url}/models", timeout=20)
    finally:
        loop_thread.run(_set(release))
        held.join()
    assert answer_.status_code == 502, answer_.text
    error = answer_.json()["error"]
    assert error["code"] == "upstream_unreachable" and "0.3s" in error["message"]


async def _set(event: asyncio.Event) -> None:
    event.set()


def test_every_connection_line_names_hop_by_hop_headers(make_upstream,  # noqa: F811
                                                        make_proxy) -> None:
    async def ok(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": []})

    upstream = make_upstream(ok)
    proxy = make_proxy(upstream.url)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as client:
        # Two Connection lines are one list (RFC 9110 §5.3): X-Local is the connection's own.
        client.sendall(b"GET /v1/models HTTP/1.1\r\nHost: proxy\r\nConnection: keep-alive\r\n"
                       b"Connection: X-Local, close\r\nX-Local: for-this-hop\r\n\r\n")
        while client.recv(65536):
            pass
    assert "x-local" not in upstream.seen[-1][2]
