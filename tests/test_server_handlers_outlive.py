"""A handler that outlives the shutdown's cut (as one waiting for a checkpoint write does: it
runs to its end whatever cancels it) is told in the log, `handlers_still_running` with the
count; the stop goes on, and the client's stream still ends.

The grace and the waits after the cut are shortened here (the module constants and the
runner's own shutdown timeout) so the whole stop takes about a second.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.server import app as app_module
from proxy.server import drain as drain_module
from proxy.server.services import SERVICES
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from tests.harness import LoopThread, proxy_settings, start_proxy, stop_proxy

LONG = " ".join(f"word{i}" for i in range(2000))  # minutes of stream at 0.05 s a chunk
WAIT_S = 0.3


class OriginsThatOutlive:
    """`services.origins` whose note of a stream's id runs to its end however often it is
    cancelled, as a checkpoint write does; the test lets it end."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = threading.Event()

    async def stream_made(self, prepared: Any, tap: Any) -> None:
        self.entered.set()
        while not self.release.is_set():
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                pass


def _read_stream(url: str, into: dict[str, Any]) -> None:
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    data = b""
    try:
        with httpx.stream("POST", url, json=body, timeout=30) as response:
            for chunk in response.iter_bytes():
                data += chunk
                into["started"].set()
    except httpx.HTTPError as exc:
        into["error"] = exc
    finally:
        into["data"] = data
        into["started"].set()


def test_a_handler_that_outlives_the_cut_is_logged_with_the_count_and_the_stop_ends(
        loop_thread: LoopThread, make_fake: Callable[..., FakeUpstream], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "CUT_WAIT_S", WAIT_S)
    monkeypatch.setattr(drain_module, "CUT_WAIT_S", WAIT_S)
    fake = make_fake(chunk_delay=0.05)
    fake.script(Reply.text(LONG))
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), server={"shutdown_grace_s": 0.2})))
    proxy.runner._shutdown_timeout = WAIT_S  # aiohttp's wait for handlers after the drain
    outliving = OriginsThatOutlive()
    services = proxy.app[SERVICES]
    services.configured = replace(services.configured, origins=outliving)  # type: ignore[arg-type]

    read: dict[str, Any] = {"started": threading.Event()}
    reader = threading.Thread(target=_read_stream, args=(f"{proxy.base_url}/chat/completions",
                                                         read), daemon=True)
    reader.start()
    assert read["started"].wait(10)
    began = time.monotonic()
    try:
        loop_thread.run(stop_proxy(proxy), timeout=15)
        stopped_in = time.monotonic() - began
        reader.join(10)
        assert not reader.is_alive(), "the client's stream did not end"
    finally:
        loop_thread.loop.call_soon_threadsafe(outliving.release.set)

    assert outliving.entered.is_set()
    # The cut ended the stream with its error frame; the connection then closed under the
    # handler that would not end, before the stream's last chunk.
    assert b'"code":"proxy_shutting_down"' in read["data"].replace(b" ", b"")
    assert "incomplete chunked read" in str(read.get("error"))
    [cut] = proxy.logs.events("requests_cut")
    [outlived] = proxy.logs.events("handlers_still_running")
    assert cut["requests"] == 1 and outlived["requests"] == 1
    assert outlived["level"] == "warning"
    # grace + the drain's wait + aiohttp's two waits + the cleanup's wait, and no more
    assert stopped_in < 0.2 + 4 * WAIT_S + 1.5, stopped_in
