"""Answers compressed in br or zstd although the proxy asked for `Accept-Encoding: identity`,
from a tiny upstream that compresses with the real libraries: read as gzip ones are (usage,
anchors, the usage chunk hidden), streams relayed plain, bodies as they came only to a client
that accepts their encoding."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import brotli
import httpx
import openai
import pytest
import zstandard
from aiohttp import web

from proxy.server.inflate import accepts
from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.test_responses_stream_ends import MESSAGE, _completed, _delta, _opening
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import ANSWER, DONE, USAGE, USER, _chunk

ENCODINGS = ["br", "zstd"]
CHAT_BODY = json.dumps({
    "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                 "finish_reason": "stop"}], "usage": USAGE}).encode()


def _compressor(encoding: str) -> Callable[[bytes, bool], bytes]:
    """Compresses a stream piece by piece, flushing each as a server that streams does (zstd:
    a frame of its own per piece, as some servers write them)."""
    if encoding == "br":
        packer = brotli.Compressor()
        return lambda data, last: packer.process(data) + (packer.finish() if last
                                                           else packer.flush())
    return lambda data, last: zstandard.ZstdCompressor().compress(data)


def _compressing(encoding: str, chat_stream: bytes, responses_stream: bytes) -> Any:
    """An upstream that compresses every answer in `encoding`, whatever the request asked."""
    async def answer(request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        if not doc.get("stream"):
            data = (brotli.compress(CHAT_BODY) if encoding == "br"
                    else zstandard.ZstdCompressor().compress(CHAT_BODY))
            return web.Response(body=data, content_type="application/json",
                                headers={"Content-Encoding": encoding})
        stream = chat_stream if "messages" in doc else responses_stream
        out = web.StreamResponse(headers={"Content-Encoding": encoding,
                                          "Content-Type": "text/event-stream"})
        await out.prepare(request)
        pack = _compressor(encoding)
        pieces = [stream[i:i + 40] for i in range(0, len(stream), 40)]
        for n, piece in enumerate(pieces):
            await out.write(pack(piece, n == len(pieces) - 1))
            await asyncio.sleep(0.002)
        return out
    return answer


CHAT_STREAM = ANSWER + _chunk([], USAGE) + DONE
RESPONSES_STREAM = _opening() + _delta() + _completed()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_chat_stream_in_br_or_zstd_is_read_relayed_plain_and_anchors(  # noqa: F811
        make_upstream, make_proxy, encoding: str) -> None:
    upstream = make_upstream(_compressing(encoding, CHAT_STREAM, RESPONSES_STREAM))
    proxy = make_proxy(upstream.url, tokens=COUNTED)
    messages: list[Any] = list(USER)
    for _ in range(2):
        with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                          headers={"x-thread-id": "t", "Accept-Encoding": "identity"},
                          json={"model": "gpt-4o", "messages": messages,
                                "stream": True}) as answer:
            headers, raw = answer.headers, answer.read()
        assert "content-encoding" not in headers
        # The usage chunk the proxy asked for on the client's behalf is hidden.
        assert raw == ANSWER.replace(b', "usage": null', b"") + DONE
        messages += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "on"}]
    assert upstream.seen[-1][2]["accept-encoding"] == "identity"
    first, second = proxy.requests()
    assert first["usage_input"] == 11 and first["usage_chunk_hidden"] is True
    assert "upstream_error" not in first and second["anchor_used"] is True


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_responses_stream_in_br_or_zstd_reaches_the_sdk_whole(make_upstream,  # noqa: F811
                                                                make_proxy,
                                                                encoding: str) -> None:
    proxy = make_proxy(make_upstream(_compressing(encoding, CHAT_STREAM, RESPONSES_STREAM)).url, tokens=COUNTED)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    items: list[Any] = list(USER)
    for _ in range(2):
        events = list(client.responses.create(model="gpt-4o", input=items, stream=True,
                                              extra_headers={"x-thread-id": "r"}))
        assert events[-1].type == "response.completed"
        items += [MESSAGE, {"role": "user", "content": "more"}]
    client.close()
    first, second = proxy.requests()
    assert first["usage_input"] == 9 and second["anchor_used"] is True


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("accepted", ["identity", "gzip, deflate", "gzip;q=1, br;q=0, zstd;q=0",
                                      None])
def test_a_body_in_br_or_zstd_goes_plain_to_a_client_that_does_not_accept_it(  # noqa: F811
        make_upstream, make_proxy, encoding: str, accepted: str | None) -> None:
    proxy = make_proxy(make_upstream(_compressing(encoding, CHAT_STREAM, RESPONSES_STREAM)).url, tokens=COUNTED)
    with httpx.Client(timeout=20) as client:
        request = client.build_request("POST", f"{proxy.base_url}/chat/completions",
                                       json={"model": "gpt-4o", "messages": USER})
        del request.headers["Accept-Encoding"]
        if accepted is not None:
            request.headers["Accept-Encoding"] = accepted
        answer = client.send(request, stream=True)
        raw = b"".join(answer.iter_raw())
        answer.close()
    assert "content-encoding" not in answer.headers
    assert raw == CHAT_BODY and int(answer.headers["content-length"]) == len(CHAT_BODY)
    line = proxy.requests()[-1]
    assert line["usage_input"] == 11 and line["bytes_out"] == len(CHAT_BODY)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_body_in_br_or_zstd_goes_as_it_came_to_a_client_that_accepts_it(  # noqa: F811
        make_upstream, make_proxy, encoding: str) -> None:
    proxy = make_proxy(make_upstream(_compressing(encoding, CHAT_STREAM, RESPONSES_STREAM)).url, tokens=COUNTED)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": "gpt-4o", "messages": USER},
                      headers={"Accept-Encoding": f"gzip, {encoding}"}) as answer:
        raw = b"".join(answer.iter_raw())
    assert answer.headers["content-encoding"] == encoding
    plain = (brotli.decompress(raw) if encoding == "br"
             else zstandard.ZstdDecompressor().decompressobj().decompress(raw))
    assert plain == CHAT_BODY
    assert proxy.requests()[-1]["usage_input"] == 11


def test_the_sdk_reads_an_answer_in_any_encoding_the_proxy_reads(make_upstream,  # noqa: F811
                                                                 make_proxy) -> None:
    for encoding in ENCODINGS:
        proxy = make_proxy(make_upstream(
            _compressing(encoding, CHAT_STREAM, RESPONSES_STREAM)).url, tokens=COUNTED)
        client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                               timeout=20)
        completion = client.chat.completions.create(model="gpt-4o", messages=USER)
        client.close()
        assert completion.choices[0].message.content == "Hello"


def test_a_stream_that_is_not_the_br_it_claims_ends_with_an_error_frame(  # noqa: F811
        make_upstream, make_proxy) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Encoding": "br",
                                          "Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(brotli.compress(ANSWER)[:-4] + b"\xff" * 64)
        return out

    proxy = make_proxy(make_upstream(answer).url, tokens=COUNTED)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    with pytest.raises(openai.APIError, match="does not inflate"):
        list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True))
    client.close()
    assert "does not inflate" in proxy.requests()[-1]["upstream_error"]


@pytest.mark.parametrize("header, encoding, expected", [
    (None, "br", False), ("", "br", False), ("br", "br", True), ("BR;q=0.5", "br", True),
    ("br;q=0", "br", False), ("br; q=0.0", "br", False), ("*", "zstd", True),
    ("*;q=0, zstd", "zstd", True), ("zstd;q=0, *", "zstd", False), ("x-gzip", "gzip", True),
    ("gzip, deflate", "zstd", False), ("br;q=nope", "br", False), ("identity", "br", False),
])
def test_accepts_reads_weights_and_wildcards(header: str | None, encoding: str,
                                             expected: bool) -> None:
    assert accepts(header, encoding) is expected


def test_a_request_body_in_br_is_read_and_forwarded_plain(make_upstream,  # noqa: F811
                                                          make_proxy) -> None:
    # aiohttp reads br request bodies once Brotli is installed, as it reads gzip ones.
    upstream = make_upstream(_compressing("br", CHAT_STREAM, RESPONSES_STREAM))
    proxy = make_proxy(upstream.url, tokens=COUNTED)
    body = json.dumps({"model": "gpt-4o", "messages": USER}).encode()
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=brotli.compress(body),
                        headers={"Content-Encoding": "br", "Content-Type": "application/json",
                                 "Accept-Encoding": "identity"}, timeout=20)
    assert answer.status_code == 200 and answer.json()["usage"] == USAGE
    _, _, headers, sent = upstream.seen[-1]
    assert "content-encoding" not in headers and json.loads(sent)["messages"] == USER
