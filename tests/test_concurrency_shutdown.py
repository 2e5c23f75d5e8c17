"""A graceful stop while a compaction runs with its client still there, a request of the same
thread waits its turn, and another thread's stream is open: all three are cut at the grace's
end, the compaction leaves nothing behind, and the breaker is not charged for it."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from proxy.threads import ANONYMOUS
from tests.harness import LoopThread, proxy_settings, start_proxy, stop_proxy
from tests.test_compaction_detached import COMPACTION, GatedFake
from tests.test_compaction_failure_paths import over_the_limit, wait_for
from tests.test_compaction_failures import MODELS
from tests.test_server_drain import LONG, StreamRead, _last_event_data

GRACE = 0.5


def _main_model(recorded: Any) -> Reply:
    return Reply.text(LONG)


def test_a_stop_cuts_a_running_compaction_its_queue_and_a_stream_and_leaves_no_trace(
        loop_thread: LoopThread, tmp_path: Path) -> None:
    fake = GatedFake(limits={"small-*": 16_000}, chunk_delay=0.1)
    loop_thread.run(fake.start())
    fake.responder = _main_model
    FakeSummarizer.install(fake)
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), models=MODELS, compaction=COMPACTION,
        server={"shutdown_grace_s": GRACE})))
    try:
        url = f"{proxy.base_url}/chat/completions"
        stream = StreamRead(url, {"model": "small-coder", "stream": True,
                                  "messages": [{"role": "user", "content": "go"}]}, "streaming")
        assert stream.started.wait(10)
        answers: dict[str, httpx.Response] = {}

        def ask(name: str) -> None:
            answers[name] = httpx.post(url, timeout=30, headers={"x-thread-id": "busy"},
                                       json={"model": "small-coder", "messages": over})

        over = over_the_limit()
        first = threading.Thread(target=ask, args=("compacting",))
        first.start()
        wait_for(lambda: fake.summarizer_requests == 1)
        queued = threading.Thread(target=ask, args=("queued",))
        queued.start()
        turns = proxy.app[SERVICES].pipeline.compactor.turns
        wait_for(lambda: turns.waiting(ThreadKey(ANONYMOUS, "busy")) == 1)
        signalled = time.monotonic()
        asyncio.run_coroutine_threadsafe(stop_proxy(proxy), loop_thread.loop).result(20)
        first.join(10)
        queued.join(10)
        stream.join(10)
        assert time.monotonic() - signalled < GRACE + 5
    finally:
        loop_thread.loop.call_soon_threadsafe(fake.gate.set)
        loop_thread.run(fake.stop())

    for name in ("compacting", "queued"):
        assert answers[name].status_code == 503, answers[name].text
        assert answers[name].json()["error"]["code"] == "proxy_shutting_down"
    assert _last_event_data(stream.data)["error"]["code"] == "proxy_shutting_down"
    assert fake.summarizer_requests == 1, "the queued request started a summary of its own"
    assert not [r for r in fake.requests if not is_summarizer_request(r.json)
                and r.json["messages"] == over]
    [failed] = proxy.logs.events("compaction_failed")
    assert failed["stage"] == "cancelled" and not proxy.logs.events("compaction_completed")
    busy = [r for r in proxy.requests() if r.get("thread") == "busy"]
    assert [r["status"] for r in busy] == [503, 503]
    assert sorted(str(r.get("compaction_failed")) for r in busy) == ["None", "cancelled"]
    # Nothing half-written: no checkpoint, no history line, and no failure for the breaker.
    history = Path(tmp_path / "state" / "history")
    assert not history.exists() or not any(history.iterdir())
    breakers = proxy.app[SERVICES].pipeline.compactor.breakers
    assert all(state.failures == 0 for state in breakers._states.values())


@pytest.mark.parametrize("client_left", [False, True], ids=["client-waiting", "client-left"])
def test_a_checkpoint_written_across_the_cut_is_reported_as_written(
        loop_thread: LoopThread, tmp_path: Path, client_left: bool) -> None:
    """The cut lands while the checkpoint is being written: the write completes (a cancelled
    await would only lose its outcome), and the request's line says the compaction was made,
    as its `compaction_completed` does, not that it was cancelled."""
    fake = GatedFake(limits={"small-*": 16_000})
    loop_thread.run(fake.start())
    FakeSummarizer.install(fake)
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), models=MODELS, compaction=COMPACTION,
        server={"shutdown_grace_s": 0.2})))
    store = proxy.app[SERVICES].pipeline.compactor.store
    writing, release = threading.Event(), asyncio.Event()
    add_event = store.add_event

    async def slow_add_event(*args: Any) -> Any:
        writing.set()
        await release.wait()
        return await add_event(*args)

    store.add_event = slow_add_event
    answers: list[Any] = []

    def ask() -> None:
        try:
            answers.append(httpx.post(f"{proxy.base_url}/chat/completions",
                                      timeout=0.5 if client_left else 30,
                                      headers={"x-thread-id": "late"},
                                      json={"model": "small-coder", "messages": over}))
        except httpx.TimeoutException as left:
            answers.append(left)

    over = over_the_limit()
    try:
        asking = threading.Thread(target=ask)
        asking.start()
        if client_left:
            asking.join(10)
            wait_for(lambda: bool(proxy.logs.events("compaction_detached")))
        loop_thread.loop.call_soon_threadsafe(fake.gate.set)
        assert writing.wait(10)
        stopping = asyncio.run_coroutine_threadsafe(stop_proxy(proxy), loop_thread.loop)
        wait_for(lambda: bool(proxy.logs.events("requests_cut")))
        loop_thread.loop.call_soon_threadsafe(release.set)
        stopping.result(20)
        asking.join(10)
    finally:
        loop_thread.run(fake.stop())

    [completed] = proxy.logs.events("compaction_completed")
    assert not proxy.logs.events("compaction_failed")
    [line] = [r for r in proxy.requests() if r.get("thread") == "late"]
    assert line["status"] == (499 if client_left else 503)
    assert line.get("compacted") is True, line
    assert "compaction_failed" not in line, line
    if not client_left:
        assert answers[0].json()["error"]["code"] == "proxy_shutting_down"
