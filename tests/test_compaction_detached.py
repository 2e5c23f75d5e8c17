"""A compaction outlives its client: a client whose timeout is shorter than the summarizer
leaves, the compaction runs on and writes its checkpoint, the client's retry waits for it and
reuses it, and a shutdown meanwhile ends on time with a consistent store."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL, planted_session, summary_of
from tests.conftest import API_KEY
from tests.harness import LoopThread
from tests.process import ProxyProcess, assert_sound_database, cli, write_config
from tests.test_compaction_failure_paths import over_the_limit, wait_for
from tests.test_compaction_failures import MODELS, NO_CHEAP

CLIENT_TIMEOUT_S = 0.5  # the agent's timeout: far shorter than the summarizer takes
COMPACTION = {**NO_CHEAP, "summarizer": {"timeout_s": 30}}


class GatedFake(FakeUpstream):
    """The fake upstream, whose summarizer answers only once the test opens the gate."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.gate = asyncio.Event()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        async def gated(request: web.Request) -> web.StreamResponse:
            if is_summarizer_request(self.recorded(request).json):
                await self.gate.wait()
            return await handler(request)

        return await super()._middleware(request, gated)

    @property
    def summarizer_requests(self) -> int:
        return sum(is_summarizer_request(r.json) for r in self.requests)


@pytest.fixture
def gated(loop_thread: LoopThread) -> Iterator[GatedFake]:
    fake = GatedFake(limits={"small-*": LIMIT})
    loop_thread.run(fake.start())
    yield fake
    open_gate(loop_thread, fake)  # a summarizer request still held ends before the fake stops
    loop_thread.run(fake.stop())


def open_gate(loop_thread: LoopThread, fake: GatedFake) -> None:
    loop_thread.loop.call_soon_threadsafe(fake.gate.set)


def ask(base_url: str, messages: list[dict[str, Any]], thread: str,
        timeout: float = 30) -> openai.APIResponse[Any]:
    with openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0,
                       timeout=timeout) as client:
        return client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers={"x-thread-id": thread})


def ask_and_leave(base_url: str, messages: list[dict[str, Any]], thread: str) -> None:
    with pytest.raises(openai.APITimeoutError):
        ask(base_url, messages, thread, timeout=CLIENT_TIMEOUT_S)


def noticed(events: Any) -> bool:
    """The proxy saw the client go: its compaction detached (or, as a proxy that cancels it
    would say, failed)."""
    return bool(events("compaction_detached") or events("compaction_failed"))


def line_of(proxy: Any, thread: str) -> dict[str, Any]:
    return [r for r in proxy.requests() if r.get("thread") == thread][-1]


# ------------------------------------------------------------------ in process


def test_a_compaction_whose_client_left_still_writes_its_checkpoint(
        loop_thread: LoopThread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    ask_and_leave(proxy.base_url, over_the_limit(), "left")
    wait_for(lambda: noticed(proxy.logs.events))
    assert not proxy.logs.events("compaction_failed"), "the compaction ended with its client"
    assert gated.summarizer_requests == 1

    open_gate(loop_thread, gated)
    wait_for(lambda: any(r.get("thread") == "left" for r in proxy.requests()))
    [completed] = proxy.logs.events("compaction_completed")
    assert (completed["thread"], completed["detached"]) == ("left", True)
    assert not proxy.logs.events("compaction_failed")
    line = line_of(proxy, "left")
    assert (line["status"], line["error"]) == (499, "client_disconnected")
    assert line["compaction_detached"] is True and line["compacted"] is True
    store = proxy.app[SERVICES].pipeline.store
    [event] = loop_thread.run(store.events(ThreadKey(line["tenant"], "left")))
    assert event.seq == completed["seq"]
    [started] = proxy.logs.events("compaction_started")
    assert summarizer.calls == started["summarizer_calls"]


def test_the_retry_of_a_client_that_left_waits_for_its_compaction_and_reuses_it(
        loop_thread: LoopThread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    over = over_the_limit()
    ask_and_leave(proxy.base_url, over, "retried")
    wait_for(lambda: noticed(proxy.logs.events))

    gated.script(Reply.text("answered after the compaction"))
    answers: list[openai.APIResponse[Any]] = []
    retry = threading.Thread(target=lambda: answers.append(ask(proxy.base_url, over, "retried")))
    retry.start()
    # The retry's handler runs beside the detached one (or, without one, asks the summarizer).
    wait_for(lambda: proxy.app[SERVICES].drain.in_flight == 2 or gated.summarizer_requests > 1)
    time.sleep(0.3)  # and reaches the thread's lock, held by the detached compaction
    assert gated.summarizer_requests == 1, "the retry asked the summarizer itself"
    assert not answers
    open_gate(loop_thread, gated)
    retry.join(30)

    [answer] = answers
    assert answer.status_code == 200
    assert answer.parse().choices[0].message.content == "answered after the compaction"
    assert answer.headers["x-compaction"] == "applied"
    [started] = proxy.logs.events("compaction_started")  # one summary, its calls only
    assert summarizer.calls == gated.summarizer_requests == started["summarizer_calls"]
    [completed] = proxy.logs.events("compaction_completed")
    assert completed["detached"] is True
    left, retried = [r for r in proxy.requests() if r.get("thread") == "retried"]
    assert (left["status"], left["compaction_detached"]) == (499, True)
    assert (retried["status"], retried["compaction_reused"]) == (200, completed["seq"])
    main = [r for r in gated.requests if not is_summarizer_request(r.json)]
    assert len(main) == 1 and summary_of(main[0].body) is not None


def test_the_retry_of_a_breaker_trial_whose_client_left_waits_for_the_trial(
        loop_thread: LoopThread, gated: GatedFake, make_proxy) -> None:
    """The half-open breaker's one trial is this thread's own compaction: its client's retry
    waits for it (and reuses its checkpoint) instead of a 503 "a trial summary is running"."""
    summarizer = FakeSummarizer.install(gated, fail=1)
    proxy = make_proxy(gated, models=MODELS, compaction={
        **COMPACTION, "breaker": {"failures": 1, "base_cooldown_s": 0.3}})
    over = over_the_limit()
    open_gate(loop_thread, gated)
    assert ask_status(proxy.base_url, over, "opener") == 503  # the failure opens the breaker
    loop_thread.loop.call_soon_threadsafe(gated.gate.clear)
    time.sleep(0.35)  # the cooldown ends: the next compaction is the trial

    ask_and_leave(proxy.base_url, over, "trial")
    wait_for(lambda: noticed(proxy.logs.events))
    gated.script(Reply.text("answered after the trial"))
    answers: list[Any] = []

    def retry_it() -> None:
        try:
            answers.append(ask(proxy.base_url, over, "trial"))
        except openai.APIStatusError as refused:
            answers.append(refused)

    retry = threading.Thread(target=retry_it)
    retry.start()
    wait_for(lambda: proxy.app[SERVICES].drain.in_flight == 2 or bool(answers))
    time.sleep(0.3)
    assert not answers, f"the retry did not wait for its own thread's trial: {answers}"
    open_gate(loop_thread, gated)
    retry.join(30)

    [answer] = answers
    assert answer.status_code == 200
    assert answer.parse().choices[0].message.content == "answered after the trial"
    [completed] = proxy.logs.events("compaction_completed")
    assert (completed["thread"], completed["detached"]) == ("trial", True)
    retried = line_of(proxy, "trial")
    assert (retried["status"], retried["compaction_reused"]) == (200, completed["seq"])
    _, trial = proxy.logs.events("compaction_started")  # the retry started none
    assert trial["thread"] == "trial"
    assert summarizer.calls == 1 + trial["summarizer_calls"]  # the opener's first call failed


def ask_status(base_url: str, messages: list[dict[str, Any]], thread: str) -> int:
    try:
        return ask(base_url, messages, thread).status_code
    except openai.APIStatusError as error:
        return error.status_code


def test_a_manual_compact_whose_client_left_still_writes_its_checkpoint(
        loop_thread: LoopThread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    messages, _ = planted_session(40)
    command = [*messages[:21], {"role": "user", "content": "/compact"}]
    ask_and_leave(proxy.base_url, command, "manual")
    wait_for(lambda: noticed(proxy.logs.events))
    open_gate(loop_thread, gated)
    wait_for(lambda: any(r.get("thread") == "manual" for r in proxy.requests()))
    [completed] = proxy.logs.events("compaction_completed")
    assert (completed["strategy"], completed["detached"]) == ("manual", True)
    line = line_of(proxy, "manual")
    assert (line["status"], line["manual_compact"], line["compaction_detached"]) == (
        499, True, True)

    again = ask(proxy.base_url, command, "manual")  # its retry: already done
    assert again.status_code == 200 and again.headers["x-compaction"] == "none"
    [started] = proxy.logs.events("compaction_started")
    assert summarizer.calls == started["summarizer_calls"]


def test_a_detached_compaction_that_breaks_is_logged_not_lost(
        loop_thread: LoopThread, gated: GatedFake, make_proxy) -> None:
    FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    compactor = proxy.app[SERVICES].pipeline.compactor

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug after the summary")

    compactor._finish = broken
    ask_and_leave(proxy.base_url, over_the_limit(), "broken")
    wait_for(lambda: noticed(proxy.logs.events))
    open_gate(loop_thread, gated)
    wait_for(lambda: any(r.get("thread") == "broken" for r in proxy.requests()))
    [error] = proxy.logs.events("unhandled_error")
    assert (error["thread"], error["detached"]) == ("broken", True)
    assert "a bug after the summary" in error["exception"]
    assert line_of(proxy, "broken")["status"] == 499


# ------------------------------------------------------------------ SIGTERM


def _serve(tmp_path: Path, fake: GatedFake, grace_s: float) -> tuple[ProxyProcess, Path]:
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          server={"shutdown_grace_s": grace_s}, models=MODELS,
                          compaction=COMPACTION)
    return ProxyProcess(config), config


def _stored_event(config: Path, thread: str) -> dict[str, Any] | None:
    shown = cli("inspect", thread, "--config", str(config))
    if shown.returncode == 1 and "no thread" in shown.stderr:
        return None
    assert shown.returncode == 0, shown.stderr
    [state] = orjson.loads(shown.stdout)
    return state["checkpoint"]


def _assert_no_lost_task(proxy: ProxyProcess) -> None:
    output = b"".join(proxy.raw)
    assert b"Task was destroyed" not in output and b"never retrieved" not in output


def test_sigterm_during_a_detached_compaction_cuts_it_at_the_grace_end(
        tmp_path: Path, gated: GatedFake) -> None:
    FakeSummarizer.install(gated)
    grace = 1.0
    proxy, config = _serve(tmp_path, gated, grace)
    try:
        ask_and_leave(proxy.base_url, over_the_limit(), "cut")
        wait_for(lambda: noticed(proxy.events))
        assert not proxy.events("compaction_failed"), "the compaction ended with its client"
        signalled = time.monotonic()
        proxy.signal(signal.SIGTERM)
        assert proxy.wait(grace + 10) == 0
        assert time.monotonic() - signalled < grace + 5, "the shutdown waited past its grace"
    finally:
        proxy.kill()
    [failed] = proxy.events("compaction_failed")
    assert (failed["stage"], failed["detached"]) == ("cancelled", True)
    assert not proxy.events("compaction_completed")
    [line] = proxy.events("request")
    assert (line["status"], line["compaction_failed"], line["compaction_detached"]) == (
        499, "cancelled", True)
    assert proxy.events("requests_cut") and proxy.events("stopped")
    _assert_no_lost_task(proxy)
    assert_sound_database(tmp_path / "state" / "state.db")
    assert _stored_event(config, "cut") is None


def test_sigterm_waits_for_a_detached_compaction_that_ends_within_the_grace(
        tmp_path: Path, loop_thread: LoopThread, gated: GatedFake) -> None:
    FakeSummarizer.install(gated)
    proxy, config = _serve(tmp_path, gated, grace_s=10)
    try:
        ask_and_leave(proxy.base_url, over_the_limit(), "drained")
        wait_for(lambda: noticed(proxy.events))
        proxy.signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proxy.process.poll() is None, "the shutdown did not wait for the compaction"
        opened = time.monotonic()
        open_gate(loop_thread, gated)
        assert proxy.wait(15) == 0
        assert time.monotonic() - opened < 5
    finally:
        proxy.kill()
    [completed] = proxy.events("compaction_completed")
    assert completed["detached"] is True
    assert not proxy.events("compaction_failed") and not proxy.events("requests_cut")
    assert proxy.events("request")[0]["status"] == 499
    _assert_no_lost_task(proxy)
    assert_sound_database(tmp_path / "state" / "state.db")
    event = _stored_event(config, "drained")
    assert event is not None and event["seq"] == completed["seq"]
    history = Path(event["history_file"])
    assert history.stat().st_size == event["history_end"]
