"""An answer that inflates past any real answer's size (a decompression bomb: a megabyte of gzip
that says a gigabyte of zeros) is read no further than `INFLATED_LIMIT`: a body becomes a 502
in OpenAI's error shape, a stream ends with its error frame; the proxy's memory grows by the
bound at most, not by the gigabyte. Real bombs, made by the real libraries."""

from __future__ import annotations

import asyncio
import functools
import json
import zlib
from collections.abc import Callable, Iterator

import brotli
import httpx
import openai
import pytest
import zstandard
from aiohttp import web

from proxy.server.inflate import INFLATED_LIMIT, AnswerTooLarge, inflated, inflater
from proxy.server.upstream import answer_failed
from proxy.settings import UpstreamSettings
from tests.conftest import API_KEY
from tests.test_responses_stream_ends import INPUT, MODEL
from tests.test_server_upstream_faults import CHAT
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import ANSWER, USER

MIB = 1024 * 1024
BOMB_MIB = 1024  # what the bomb says: four times the bound


@functools.cache
def gzip_bomb() -> bytes:
    """1 GiB of zeros as one gzip member, compressed a mebibyte at a time (about 1 MB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    return b"".join([*(packer.compress(zeros) for _ in range(BOMB_MIB)), packer.flush()])


def _bomb(encoding: str, mib: int) -> bytes:
    zeros = bytes(mib * MIB)
    if encoding == "br":
        return brotli.compress(zeros, quality=1)
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=1).compress(zeros)
    return zlib.compress(zeros, 9) if encoding == "deflate" else gzip_compress(zeros)


def gzip_compress(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


def _pieces(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i:i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_body_that_inflates_past_the_bound_is_refused(encoding: str) -> None:
    with pytest.raises(AnswerTooLarge, match="inflates past"):
        inflated(_bomb(encoding, 16), encoding, limit=4 * MIB)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_stream_gives_no_more_than_the_bound_however_it_is_read(encoding: str) -> None:
    inflate = inflater(encoding, limit=4 * MIB)
    assert inflate is not None
    given = 0
    with pytest.raises(AnswerTooLarge):
        for piece in _pieces(_bomb(encoding, 16), 1000):
            given += len(inflate(piece))
    assert given <= 4 * MIB


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_an_answer_just_at_the_bound_inflates_whole(encoding: str) -> None:
    assert inflated(_bomb(encoding, 4), encoding, limit=4 * MIB) == bytes(4 * MIB)
    inflate = inflater(encoding, limit=4 * MIB)
    assert inflate is not None
    assert sum(len(inflate(piece)) for piece in _pieces(_bomb(encoding, 4), 333)) == 4 * MIB


def test_one_read_of_a_bomb_is_inflated_no_further_than_the_bound() -> None:
    """A single read that says a gigabyte: the library is asked for the bound, not the whole
    (the old inflater returned the gigabyte in one piece)."""
    inflate = inflater("gzip")
    assert inflate is not None
    with pytest.raises(AnswerTooLarge):
        inflate(gzip_bomb())


def _peak_growth(run: Callable[[], object]) -> int:
    """How far `run` raised this process's peak resident memory (the proxy runs in it)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # the peak starts again from what is resident now
    before = _status("VmRSS")
    run()
    return _status("VmHWM") - before


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(field)


def _bomb_upstream(stream: bool, head: bytes = b"") -> Callable[[web.Request], object]:
    async def answer(request: web.Request) -> web.StreamResponse:
        kind = "text/event-stream" if stream else "application/json"
        out = web.StreamResponse(headers={"Content-Encoding": "gzip", "Content-Type": kind})
        await out.prepare(request)
        if head:
            await out.write(gzip_compress(head))
        for piece in _pieces(gzip_bomb(), 64 * 1024):
            await out.write(piece)
            await asyncio.sleep(0)
        return out
    return answer


def test_a_gzip_bomb_body_is_a_502_and_costs_no_gigabyte(make_upstream,  # noqa: F811
                                                         make_proxy) -> None:
    gzip_bomb()  # made before the measure
    proxy = make_proxy(make_upstream(_bomb_upstream(stream=False)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=60)
    refused: list[openai.APIStatusError] = []

    def ask() -> None:
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="gpt-4o", messages=USER)
        refused.append(raised.value)

    growth = _peak_growth(ask)
    client.close()
    assert refused[0].status_code == 502
    assert refused[0].code == "upstream_answer_too_large"
    assert "inflates past" in refused[0].message
    # The bound's worth of pieces, and no more (the old code held 2 GiB: the gigabyte, joined).
    assert growth < 1.5 * INFLATED_LIMIT, growth
    line = proxy.requests()[-1]
    assert line["status"] == 502


def test_a_gzip_bomb_mid_stream_ends_it_with_an_error_frame(make_upstream,  # noqa: F811
                                                            make_proxy) -> None:
    gzip_bomb()
    first_event = ANSWER.split(b"\n\n")[0] + b"\n\n"  # the bomb comes mid-stream
    proxy = make_proxy(make_upstream(_bomb_upstream(stream=True, head=first_event)).url)
    received = bytearray()

    def read() -> None:
        with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=60,
                          headers={"Authorization": f"Bearer {API_KEY}"},
                          json={**CHAT, "stream": True}) as answer:
            assert answer.status_code == 200
            for part in answer.iter_bytes():
                received.extend(part[-4096:])  # its tail is what matters, not its zeros
                del received[:-8192]

    growth = _peak_growth(read)
    tail = bytes(received).rstrip(b"\0")
    error = json.loads(tail.rsplit(b"data: ", 1)[1].split(b"\n")[0])
    assert "inflates past" in error["error"]["message"]
    # The tap holds the unended line of zeros as well, up to the bound (relayed as it goes).
    assert growth < 3 * INFLATED_LIMIT < BOMB_MIB * MIB, growth
    assert "inflates past" in proxy.requests()[-1]["upstream_error"]


def test_a_gzip_bomb_at_a_responses_streams_head_fails_the_sdks_call(make_upstream,  # noqa: F811
                                                                     make_proxy) -> None:
    """The Responses peek inflates the stream's head before relaying it (bounded as the relay
    is): the bomb is refused there, a 502, or by the relay once the peek gave up waiting, an
    error event; the SDK raises either way, saying why."""
    gzip_bomb()
    proxy = make_proxy(make_upstream(_bomb_upstream(stream=True)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=60)
    with pytest.raises(openai.APIError, match="inflates past") as refused:
        list(client.responses.create(model=MODEL, input=INPUT, stream=True))
    client.close()
    if isinstance(refused.value, openai.APIStatusError):
        assert refused.value.status_code == 502
        assert refused.value.code == "upstream_answer_too_large"


def test_a_bomb_read_before_relaying_is_the_502_that_names_it() -> None:
    """The peek's and the summarizer's reads fail through `answer_failed`: its 502 keeps the
    code that says what happened (the peek above may leave the bomb to the relay)."""
    upstream = UpstreamSettings(name="main", base_url="http://127.0.0.1:9/v1")
    error = answer_failed(upstream, AnswerTooLarge("gzip", INFLATED_LIMIT))
    assert (error.status, error.code) == (502, "upstream_answer_too_large")
    assert "inflates past" in error.message
