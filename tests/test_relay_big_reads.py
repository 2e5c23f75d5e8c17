"""A stream whose upstream writes faster than the proxy reads comes in reads of hundreds of KB,
thousands of events each: the tap reads them a slice at a time, the event loop serving others
between two slices, and the client gets the same bytes. A real `serve` process whose tap
records what it is fed (a prelude), behind an upstream that writes a 3 MB stream at once."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.harness import LoopThread
from tests.process import ProxyProcess, write_config

EVENTS = 20_000
LARGEST_FEED = 64 * 1024  # a slice is 16 KB; a read fed whole is hundreds of KB

_RECORD_FEEDS = """
import proxy.server.taps as taps
_real, _log = taps._EventTap.feed, open({where!r}, "a")
def feed(self, chunk):
    _log.write(f"{{len(chunk)}}\\n")
    _log.flush()
    return _real(self, chunk)
taps._EventTap.feed = feed
"""


def _stream() -> bytes:
    def event(delta: dict, finish: str | None = None) -> bytes:
        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                 "model": "small-1", "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish}]}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
    usage = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
             "model": "small-1", "choices": [],
             "usage": {"prompt_tokens": 9, "completion_tokens": EVENTS, "total_tokens": EVENTS + 9}}
    return b"".join([event({"role": "assistant", "content": ""}),
                     *(event({"content": f" w{n}"}) for n in range(EVENTS)),
                     event({}, "stop"), b"data: " + orjson.dumps(usage) + b"\n\n",
                     b"data: [DONE]\n\n"])


def _burst_upstream(gzipped: bool) -> Iterator[tuple[str, bytes]]:
    """An upstream that writes the whole stream in one write, on a loop of its own; `gzipped`,
    compressed, though the proxy asks for `identity` (some servers compress all the same)."""
    body = _stream()
    sent = gzip.compress(body) if gzipped else body
    headers = {"Content-Type": "text/event-stream",
               **({"Content-Encoding": "gzip"} if gzipped else {})}

    async def complete(request: web.Request) -> web.StreamResponse:
        await request.read()
        out = web.StreamResponse(headers=headers)
        await out.prepare(request)
        await out.write(sent)
        await out.write_eof()
        return out

    async def start() -> web.AppRunner:  # made on the loop it runs on
        app = web.Application()
        app.router.add_post("/v1/chat/completions", complete)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    loop_thread = LoopThread()
    runner = loop_thread.run(start())
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", body
    finally:
        loop_thread.run(runner.cleanup())
        loop_thread.close()
        loop_thread.loop.close()


@pytest.fixture
def burst_upstream() -> Iterator[tuple[str, bytes]]:
    yield from _burst_upstream(gzipped=False)


@pytest.fixture
def gzipped_burst_upstream() -> Iterator[tuple[str, bytes]]:
    yield from _burst_upstream(gzipped=True)


def test_a_burst_of_events_is_fed_in_slices_and_relayed_byte_for_byte(
        tmp_path: Path, burst_upstream: tuple[str, bytes]) -> None:
    _fed_in_slices(tmp_path, *burst_upstream)


def test_a_compressed_burst_is_sliced_once_inflated(
        tmp_path: Path, gzipped_burst_upstream: tuple[str, bytes]) -> None:
    """3 MB of events is some 100 KB of gzip: a 16 KB slice of that inflates to hundreds of
    KB, fed whole before the slicing moved after the inflating. The client gets it plain."""
    _fed_in_slices(tmp_path, *gzipped_burst_upstream)


def _fed_in_slices(tmp_path: Path, url: str, body: bytes) -> None:
    feeds = tmp_path / "feeds"
    config = write_config(tmp_path / "p.yaml", url, tmp_path / "state")
    proxy = ProxyProcess(config, prelude=_RECORD_FEEDS.format(where=str(feeds)))
    try:
        got = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                         json={"model": "small-1", "stream": True,
                               "stream_options": {"include_usage": True},
                               "messages": [{"role": "user", "content": "at length"}]},
                         headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "t-burst"})
        assert got.status_code == 200
        assert "content-encoding" not in got.headers and got.content == body
        fed = [int(n) for n in feeds.read_text().split()]
        assert sum(fed) == len(body)
        assert max(fed) <= LARGEST_FEED, f"a read of {max(fed):,} bytes was fed whole"
    finally:
        proxy.kill()
