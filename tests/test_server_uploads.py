"""Uploads larger than `server.max_body_mb` on pass-through paths: streamed upstream as they
arrive, within `server.max_upload_mb`, with their length; JSON and compressed bodies are still
held to `max_body_mb`."""

from __future__ import annotations

import gzip
import hashlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import openai
import pytest
from aiohttp import web

from tests.harness import LoopThread, serve_every_path

MB = 1024 * 1024


@dataclass
class CountingUpstream:
    """Reads each body as a stream (no size limit), keeping only its length and digest."""

    url: str = ""
    seen: list[dict[str, object]] = field(default_factory=list)


@pytest.fixture
def counting_upstream(loop_thread: LoopThread) -> Iterator[CountingUpstream]:
    upstream = CountingUpstream()
    runners: list[web.AppRunner] = []

    async def record(request: web.Request) -> web.StreamResponse:
        digest, size = hashlib.sha256(), 0
        async for chunk in request.content.iter_chunked(1 << 16):
            digest.update(chunk)
            size += len(chunk)
        upstream.seen.append({"path": request.raw_path, "size": size,
                              "sha256": digest.hexdigest(),
                              "content-length": request.headers.get("Content-Length"),
                              "transfer-encoding": request.headers.get("Transfer-Encoding"),
                              "content-type": request.headers.get("Content-Type")})
        return web.json_response({"id": "file-1", "object": "file", "bytes": size,
                                  "created_at": 1, "filename": "big.jsonl", "purpose": "batch",
                                  "status": "processed"})

    upstream.url = f"http://127.0.0.1:{loop_thread.run(serve_every_path(record, runners))}/v1"
    yield upstream
    for runner in runners:
        loop_thread.run(runner.cleanup())


def test_an_upload_over_the_body_limit_is_streamed_up_whole(counting_upstream, make_proxy,
                                                            make_client) -> None:
    proxy = make_proxy(counting_upstream.url, server={"max_body_mb": 1, "max_upload_mb": 8})
    content = b'{"custom_id": "request-1", "method": "POST"}\n' * (3 * MB // 45)
    done = make_client(proxy.base_url).files.create(file=("big.jsonl", content), purpose="batch")
    assert done.id == "file-1"
    seen, = counting_upstream.seen
    assert seen["path"] == "/v1/files"
    assert str(seen["content-type"]).startswith("multipart/form-data; boundary=")
    # Sent on with its length (not chunked), every byte of the client's multipart body.
    assert seen["transfer-encoding"] is None and int(str(seen["content-length"])) == seen["size"]
    assert int(str(seen["size"])) > len(content)
    line = proxy.requests()[-1]
    assert (line["status"], line["bytes_in"]) == (200, seen["size"])


def test_a_streamed_upload_arrives_byte_for_byte(counting_upstream, make_proxy) -> None:
    proxy = make_proxy(counting_upstream.url, server={"max_body_mb": 1, "max_upload_mb": 8})
    content = bytes(range(256)) * (5 * MB // 256)
    answer = httpx.post(f"{proxy.base_url}/uploads/upload_1/parts", content=content,
                        headers={"Content-Type": "application/octet-stream",
                                 "Authorization": "Bearer sk-test"}, timeout=30)
    assert answer.status_code == 200, answer.text
    seen, = counting_upstream.seen
    assert (seen["size"], seen["sha256"]) == (len(content), hashlib.sha256(content).hexdigest())


def test_an_upload_over_the_upload_limit_is_413_before_any_of_it_is_sent(counting_upstream,
                                                                         make_proxy) -> None:
    proxy = make_proxy(counting_upstream.url, server={"max_body_mb": 1, "max_upload_mb": 2})
    head = (f"POST /v1/files HTTP/1.1\r\nHost: proxy\r\n"
            f"Content-Type: multipart/form-data; boundary=x\r\n"
            f"Content-Length: {3 * MB}\r\nExpect: 100-continue\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
        client.sendall(head)
        first = client.recv(65536)
    assert first.startswith(b"HTTP/1.1 413 "), first[:40]
    assert b"server.max_upload_mb" in first and b"Connection: close" in first
    assert counting_upstream.seen == []


def test_an_upload_within_its_limit_is_told_to_continue(counting_upstream, make_proxy) -> None:
    proxy = make_proxy(counting_upstream.url, server={"max_body_mb": 1, "max_upload_mb": 4})
    body = b"y" * (2 * MB)
    head = (f"POST /v1/files HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
        client.sendall(head)
        assert client.recv(65536).startswith(b"HTTP/1.1 100 ")
        client.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += client.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:40]
    assert counting_upstream.seen[0]["size"] == len(body)


@pytest.mark.parametrize("headers", [{"Content-Type": "application/json"},
                                     {"Content-Type": "application/octet-stream",
                                      "Content-Encoding": "gzip"}], ids=["json", "compressed"])
def test_json_and_compressed_bodies_stay_held_to_the_body_limit(counting_upstream, make_proxy,
                                                                headers) -> None:
    proxy = make_proxy(counting_upstream.url, server={"max_body_mb": 1, "max_upload_mb": 8})
    body = b"z" * (2 * MB)
    compressed = "Content-Encoding" in headers
    answer = httpx.post(f"{proxy.base_url}/embeddings", timeout=30, headers=headers,
                        content=gzip.compress(body) if compressed else body)
    assert answer.status_code == 413 and counting_upstream.seen == []


def test_an_upload_limit_below_the_body_limit_is_a_config_error() -> None:
    from proxy.settings import ConfigError, parse_settings

    with pytest.raises(ConfigError, match="max_upload_mb"):
        parse_settings({"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}},
                        "server": {"max_body_mb": 64, "max_upload_mb": 32}}, {})


def test_an_upload_through_the_official_client_is_relayed_when_the_upstream_is_gone(
        make_proxy, make_client) -> None:
    proxy = make_proxy("http://127.0.0.1:9/v1", server={"max_body_mb": 1, "max_upload_mb": 8})
    with pytest.raises(openai.APIStatusError) as failed:
        make_client(proxy.base_url).files.create(
            file=("big.jsonl", b"x" * (2 * MB)), purpose="batch")
    assert failed.value.status_code == 502
