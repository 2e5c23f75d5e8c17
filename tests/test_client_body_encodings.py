"""Compressed request bodies: every coding the proxy reads (gzip, deflate, br, zstd, stacked)
goes upstream plain, without its `Content-Encoding`; each is held to `server.max_body_mb`
inflated, a bomb refused without inflating it; an unknown coding is a 415 and a body that is
not what its coding says a 400, both in OpenAI's error shape and before anything goes upstream.
Sent as real compressed bytes by aiohttp's client, through the proxy, to the fake upstream."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import socket
import zlib
from typing import Any

import aiohttp
import brotli
import pytest
import zstandard
from multidict import CIMultiDict

from tests.conftest import API_KEY
from tests.test_inflate_bombs import _peak_growth
from tests.test_server_uploads import counting_upstream  # noqa: F401 - the fixture

MIB = 1024 * 1024
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello."}]}
PLAIN = json.dumps({**CHAT, "input": "x"}).encode()  # an embedding's field too


def compress(data: bytes, encoding: str) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "br":
        return brotli.compress(data)
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=3).compress(data)  # Codex CLI's level
    assert encoding == "identity"
    return data


def stacked(data: bytes, codings: list[str]) -> bytes:
    """`data` with each coding applied in the order listed (RFC 9110 §8.4)."""
    for coding in codings:
        data = compress(data, coding)
    return data


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    """One POST of `body` as it is (aiohttp's client compresses nothing unless asked); the
    status, the answer's JSON and its `Connection` header."""
    async def send() -> tuple[int, dict[str, Any], str]:
        async with aiohttp.ClientSession() as session:
            # A file object: aiohttp warns of large raw bytes; it sends the length all the same.
            async with session.post(url, data=io.BytesIO(body), headers={
                    "Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
                    **headers}) as answer:
                return (answer.status, await answer.json(content_type=None),
                        answer.headers.get("Connection", ""))
    return asyncio.run(send())


ROUTES = ["/chat/completions", "/embeddings"]  # the pipeline's route and a pass-through one


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("encoding", ["zstd", "br", "gzip", "x-gzip", "deflate", "identity"])
def test_a_compressed_body_goes_upstream_plain_without_its_coding(proxy, fake, path,
                                                                  encoding) -> None:
    status, answer, _ = post(proxy.base_url + path, compress(PLAIN, encoding),
                             {"Content-Encoding": encoding})
    assert status == 200, answer
    sent = fake.last(path)
    assert sent.body == PLAIN
    assert "content-encoding" not in sent.headers


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("codings", [["gzip", "br"], ["zstd", "gzip"], ["deflate", "zstd"]])
def test_stacked_codings_are_undone_in_reverse_order(proxy, fake, path, codings) -> None:
    status, answer, _ = post(proxy.base_url + path, stacked(PLAIN, codings),
                             {"Content-Encoding": ", ".join(codings)})
    assert status == 200, answer
    assert fake.last(path).body == PLAIN
    assert "content-encoding" not in fake.last(path).headers


def test_codings_on_several_header_lines_are_one_list(proxy, fake) -> None:
    async def send() -> int:
        # A multidict sends both lines.
        lines = CIMultiDict([("Authorization", f"Bearer {API_KEY}"),
                             ("Content-Type", "application/json"),
                             ("Content-Encoding", "gzip"), ("Content-Encoding", "zstd")])
        async with aiohttp.ClientSession() as session:
            async with session.post(proxy.base_url + "/embeddings", headers=lines,
                                    data=stacked(PLAIN, ["gzip", "zstd"])) as answer:
                return answer.status
    assert asyncio.run(send()) == 200
    assert fake.last("/embeddings").body == PLAIN


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("coding", ["compress", "snappy", "gzip, lz4", "x-unknown"])
def test_an_unknown_coding_is_a_415_that_names_it(proxy, fake, path, coding) -> None:
    status, answer, connection = post(proxy.base_url + path, gzip.compress(PLAIN),
                                      {"Content-Encoding": coding})
    assert status == 415
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error",
                                              "unsupported_content_encoding")
    unknown = coding.split(", ")[-1]
    assert repr(unknown) in error["message"] and "zstd" in error["message"]
    assert fake.requests == []
    assert proxy.requests()[-1]["status"] == 415


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_body_that_is_not_its_coding_is_a_400(proxy, fake, path, encoding) -> None:
    status, answer, _ = post(proxy.base_url + path, b"\x01\x02 not compressed " + PLAIN,
                             {"Content-Encoding": encoding})
    assert status == 400
    assert answer["error"]["code"] == "invalid_body_encoding"
    assert encoding in answer["error"]["message"]
    assert fake.requests == []


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_body_cut_short_inside_its_coding_is_a_400(proxy, fake, path, encoding) -> None:
    # The HTTP framing is whole (its Content-Length is what was sent); the coding's own end
    # never came. Inflated as far as it goes it would be a shorter body: a pass-through route
    # would send it upstream as if it were the client's.
    cut = compress(PLAIN * 20, encoding)[:-12]
    status, answer, _ = post(proxy.base_url + path, cut, {"Content-Encoding": encoding})
    assert status == 400
    assert answer["error"]["code"] == "invalid_body_encoding"
    assert "cut short" in answer["error"]["message"] and encoding in answer["error"]["message"]
    assert fake.requests == []


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_body_over_the_limit_once_inflated_is_a_413(make_proxy, fake, encoding) -> None:
    proxy = make_proxy(fake, server={"max_body_mb": 1})
    padded = json.dumps({**CHAT, "input": "x" * (2 * MIB)}).encode()
    status, answer, _ = post(proxy.base_url + "/embeddings", compress(padded, encoding),
                             {"Content-Encoding": encoding})
    assert status == 413
    assert answer["error"]["code"] == "request_too_large"
    assert "max_body_mb" in answer["error"]["message"]
    assert fake.requests == []


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_body_just_under_the_limit_once_inflated_is_read(make_proxy, fake, encoding) -> None:
    proxy = make_proxy(fake, server={"max_body_mb": 1})
    padded = json.dumps({**CHAT, "input": "x" * (MIB - 200)}).encode()
    status, _, _ = post(proxy.base_url + "/embeddings", compress(padded, encoding),
                        {"Content-Encoding": encoding})
    assert status == 200
    assert fake.last("/embeddings").body == padded


def _bomb(encoding: str) -> bytes:
    """About a megabyte (less for br and zstd) that inflates to a gibibyte of zeros."""
    zeros = bytes(MIB)
    if encoding == "zstd":
        packer = zstandard.ZstdCompressor(level=1).compressobj()
        return b"".join([*(packer.compress(zeros) for _ in range(1024)), packer.flush()])
    if encoding == "br":
        packer = brotli.Compressor(quality=1)
        return b"".join([*(packer.process(zeros) for _ in range(1024)), packer.finish()])
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    return b"".join([*(packer.compress(zeros) for _ in range(1024)), packer.flush()])


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_bomb_is_a_413_that_costs_the_limit_not_the_gibibyte(proxy, fake, encoding) -> None:
    bomb = _bomb(encoding)  # made before the measure
    outcome: list[tuple[int, dict[str, Any], str]] = []
    growth = _peak_growth(lambda: outcome.append(post(
        proxy.base_url + "/chat/completions", bomb, {"Content-Encoding": encoding})))
    status, answer, _ = outcome[0]
    assert status == 413, answer
    assert answer["error"]["code"] == "request_too_large"
    assert fake.requests == []
    # The default limit's worth of inflated pieces (64 MiB): aiohttp's own inflating, before,
    # held 250 to 500 MiB of it before it refused the body.
    assert growth < 1.5 * LIMIT, growth


LIMIT = 64 * MIB  # `server.max_body_mb`'s default


def test_an_upload_that_says_identity_is_streamed_as_one_without_a_coding(
        counting_upstream, make_proxy) -> None:  # noqa: F811
    proxy = make_proxy(counting_upstream.url, server={"max_body_mb": 1, "max_upload_mb": 8})
    content = bytes(range(256)) * (3 * MIB // 256)
    status, answer, _ = post(proxy.base_url + "/uploads/upload_1/parts", content,
                             {"Content-Type": "application/octet-stream",
                              "Content-Encoding": "identity"})
    assert status == 200, answer
    seen, = counting_upstream.seen
    assert (seen["size"], seen["sha256"]) == (len(content), hashlib.sha256(content).hexdigest())


@pytest.mark.parametrize("coding", ["compress", "zstd"])
def test_a_body_in_an_unknown_coding_is_not_asked_for(proxy, fake, coding) -> None:
    """`Expect: 100-continue`: a body the proxy will refuse unread is refused before it is
    sent; one it reads (zstd) is asked for."""
    body = compress(PLAIN, "zstd")
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
            f"Content-Type: application/json\r\nContent-Encoding: {coding}\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
        client.sendall(head)
        first = client.recv(65536)
        if coding == "zstd":
            assert first.startswith(b"HTTP/1.1 100 ")
        else:
            assert first.startswith(b"HTTP/1.1 415 "), first[:40]
            assert fake.requests == []


def test_a_coding_named_for_no_body_is_ignored(proxy, fake) -> None:
    async def get() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.get(proxy.base_url + "/models",
                                   headers={"Authorization": f"Bearer {API_KEY}",
                                            "Content-Encoding": "x-unknown"}) as answer:
                return answer.status
    assert asyncio.run(get()) == 200
    assert fake.last("/models").method == "GET"


def test_an_unknown_coding_leaves_no_error_in_the_log(proxy, fake) -> None:
    # Refused unread: aiohttp must not read (or fail to read) the rest after the answer.
    status, _, connection = post(proxy.base_url + "/chat/completions", bytes(200_000),
                                 {"Content-Encoding": "compress"})
    assert (status, connection.lower()) == (415, "close")
    assert [line for line in proxy.logs.lines if line.get("level") in ("error", "critical")] == []


def test_each_of_stacked_codings_is_held_to_the_limit(make_proxy, fake) -> None:
    proxy = make_proxy(fake, server={"max_body_mb": 1})
    padded = json.dumps({**CHAT, "input": "x" * (2 * MIB)}).encode()
    status, answer, _ = post(proxy.base_url + "/embeddings", stacked(padded, ["zstd", "gzip"]),
                             {"Content-Encoding": "zstd, gzip"})
    assert (status, answer["error"]["code"]) == (413, "request_too_large")
    assert fake.requests == []


def test_a_zstd_responses_request_as_codex_sends_it_is_answered(proxy, fake) -> None:
    request = json.dumps({"model": "gpt-4o", "stream": False, "store": False,
                          "input": [{"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": "hi"}]}]})
    status, answer, _ = post(proxy.base_url + "/responses", compress(request.encode(), "zstd"),
                             {"Content-Encoding": "zstd"})
    assert status == 200, answer
    assert answer["object"] == "response"
    assert fake.last("/responses").json == json.loads(request)
