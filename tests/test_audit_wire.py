"""The HTTP edges a transparent proxy must keep: an upstream body that breaks off on a
pass-through path, upstream answers compressed although the proxy asked for none, and headers
aiohttp would add to what the client sent."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from aiohttp import web

from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture


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
