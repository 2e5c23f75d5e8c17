"""A gzip answer may be several gzip members one after the other (RFC 1952 §2.2), as a server
that compresses each flush of a stream on its own sends it: each member is read, not the first
alone, which would end the stream there for the client without a word."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import httpx
import pytest
from aiohttp import web

from proxy.server.inflate import inflated, inflater
from tests.test_server_upstream_faults import _CHAT_BODY, _CHAT_STREAM, CHAT
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

EVENTS = [part + b"\n\n" for part in _CHAT_STREAM.split(b"\n\n")[:-1]]


def test_a_body_of_several_gzip_members_inflates_whole() -> None:
    half = len(_CHAT_BODY) // 2
    body = gzip.compress(_CHAT_BODY[:half]) + gzip.compress(_CHAT_BODY[half:])
    assert inflated(body, "gzip") == _CHAT_BODY


@pytest.mark.parametrize("size", [1, 5, 64, 4096])
def test_a_stream_of_gzip_members_inflates_whole_in_any_reads(size: int) -> None:
    sent = b"".join(map(gzip.compress, EVENTS))
    inflate = inflater("gzip")
    assert inflate is not None
    read = b"".join(inflate(sent[i:i + size]) for i in range(0, len(sent), size))
    assert read == _CHAT_STREAM


def test_bytes_after_a_zlib_stream_are_not_taken_for_another_member() -> None:
    inflate = inflater("deflate")
    assert inflate is not None
    assert inflate(zlib.compress(b"data: 1\n\n") + b"\0\0") == b"data: 1\n\n"


def test_a_stream_gzipped_a_member_per_event_reaches_the_client_whole(make_upstream,  # noqa: F811
                                                                      make_proxy) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Encoding": "gzip",
                                          "Content-Type": "text/event-stream"})
        await out.prepare(request)
        for event in EVENTS:
            await out.write(gzip.compress(event))
            await asyncio.sleep(0.01)
        return out

    proxy = make_proxy(make_upstream(answer).url)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={**CHAT, "stream": True, "stream_options": {"include_usage": True}}
                      ) as received:
        assert "content-encoding" not in received.headers
        assert received.read() == _CHAT_STREAM
    line = proxy.requests()[-1]
    assert "upstream_error" not in line and line["usage_input"] == 11
