"""The compaction flow's failure paths end to end: the breaker under queued requests and a
trial whose client left, Retry-After on every 503, a checkpoint that cannot be written, a
failed overflow retry, and a thread moved to a smaller model (SPEC §5, §9)."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server import breakers
from proxy.server.services import SERVICES
from proxy.store import HistoryFiles
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.conftest import API_KEY
from tests.test_compaction_failures import MODELS, NO_CHEAP, _main_requests, _prefix

BREAKER_OPENS_AT_ONCE = {"failures": 1, "base_cooldown_s": 60}


def post(proxy, messages: list[dict[str, Any]], thread: str, *, model: str = MODEL,
         timeout: float = 60) -> httpx.Response:
    body = orjson.dumps({"model": model, "messages": messages})
    return httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=timeout,
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               "authorization": f"Bearer {API_KEY}"})


def _sent(proxy, messages: list[dict[str, Any]], thread: str) -> socket.socket:
    """A chat request written on a raw connection, left unread: closing the socket is the
    client leaving, at the moment the test picks (reads from it do not block)."""
    body = orjson.dumps({"model": MODEL, "messages": messages})
    url = httpx.URL(proxy.base_url)
    head = (f"POST {url.path}/chat/completions HTTP/1.1\r\nhost: {url.host}:{url.port}\r\n"
            f"content-type: application/json\r\nx-thread-id: {thread}\r\n"
            f"authorization: Bearer {API_KEY}\r\ncontent-length: {len(body)}\r\n\r\n")
    connection = socket.create_connection((url.host, url.port))
    connection.sendall(head.encode() + body)
    connection.setblocking(False)
    return connection


def over_the_limit() -> list[dict[str, Any]]:
    messages, _ = planted_session(200)
    return _prefix(messages, int(LIMIT * 1.05), LIMIT * 2)


def between_trigger_and_limit() -> list[dict[str, Any]]:
    messages, _ = planted_session(200)
    return _prefix(messages, 12_600, 14_500)


def stages(proxy) -> list[str]:
    return [f["stage"] for f in proxy.logs.events("compaction_failed")]


def metric(proxy, outcome: str) -> float:
    for line in httpx.get(f"{proxy.url}/metrics").text.splitlines():
        if line.startswith("proxy_compactions_total") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# Generous: it returns as soon as the condition holds, and on a loaded machine a request of
# an over-the-limit conversation takes seconds to be counted before it reaches any lock.
def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def assert_retry_later(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "compaction_unavailable"
    assert int(answer.headers["retry-after"]) >= 1
    assert "0.0s" not in answer.text


# ------------------------------------------------------------------ the breaker


def test_requests_queued_behind_a_failed_summary_do_not_summarize_once_the_breaker_opens(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, hang=100)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "summarizer": {"timeout_s": 1}, "breaker": BREAKER_OPENS_AT_ONCE})
    over = over_the_limit()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: post(proxy, over, "queue"), range(4)))
    assert summarizer.calls == 1, "each queued request made a summary of its own"
    for answer in answers:
        assert_retry_later(answer)
    assert sorted(stages(proxy)) == ["breaker_open"] * 3 + ["summarize"]
    assert not _main_requests(fake)


def test_a_queued_request_that_fits_is_forwarded_once_the_breaker_opens(make_fake,
                                                                        make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, hang=100)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "summarizer": {"timeout_s": 1}, "breaker": BREAKER_OPENS_AT_ONCE})
    between = between_trigger_and_limit()
    fake.script(*[Reply.text("ok")] * 3)
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: post(proxy, between, "queue-fits"), range(3)))
    assert [a.status_code for a in answers] == [200] * 3
    assert summarizer.calls == 1
    assert sorted(stages(proxy)) == ["breaker_open"] * 2 + ["summarize"]


def test_a_trial_whose_client_leaves_runs_on_and_settles_the_breaker(make_fake, make_proxy,
                                                                     monkeypatch) -> None:
    now = [1_000.0]
    # Moved by the test only: on a loaded machine "reopened" came after the doubled cooldown.
    monkeypatch.setattr(breakers, "clock", lambda: now[0])
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=1)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "summarizer": {"timeout_s": 1},
        "breaker": {"failures": 1, "base_cooldown_s": 0.3}})
    over = over_the_limit()
    assert_retry_later(post(proxy, over, "opener"))
    now[0] += 0.35
    summarizer.hang = 1
    # The trial's client leaves once the trial runs, not after a set time: a loaded machine may
    # take longer than any such time to count the request and reach the summarizer.
    with _sent(proxy, over, "trial") as trial:
        wait_for(lambda: summarizer.calls == 2)
        during = post(proxy, over, "during")  # while the trial runs
        assert_retry_later(during)
        assert "trial summary is running" in during.json()["error"]["message"]
        with pytest.raises(BlockingIOError):
            trial.recv(1)  # no answer yet: the client leaves before the trial ends
    # The trial runs on without its client, to the summarizer's timeout: a failed trial.
    wait_for(lambda: stages(proxy).count("summarize") == 2)
    failed = proxy.logs.events("compaction_failed")[-1]
    assert (failed["thread"], failed["detached"]) == ("trial", True)
    assert_retry_later(post(proxy, over, "reopened"))  # the failed trial doubled the cooldown

    now[0] += 0.65
    fake.script(Reply.text("recovered"))
    answer = post(proxy, over, "after")
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted"
    started = [e["thread"] for e in proxy.logs.events("compaction_started")]
    ended = [e["thread"] for e in proxy.logs.events("compaction_completed")
             + proxy.logs.events("compaction_failed") if e.get("stage") != "breaker_open"]
    assert sorted(started) == sorted(ended), "a compaction_started was left without its end"
    assert metric(proxy, "failed_summarize") == 2.0
    line = next(r for r in proxy.requests() if r.get("thread") == "trial")
    assert (line["status"], line["compaction_failed"], line["compaction_detached"]) == (
        499, "summarize", True)


def test_a_trial_with_nothing_to_compact_does_not_block_the_breaker(make_fake,
                                                                   make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=1)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 1, "base_cooldown_s": 0.3}})
    over = over_the_limit()
    assert_retry_later(post(proxy, over, "opener"))
    time.sleep(0.35)
    task = {"role": "user", "content": "".join(f"requirement {i:04d}: keep this line\n"
                                               for i in range(1400))}  # over the trigger, fits
    fake.script(Reply.text("as it was"))
    lone = post(proxy, [{"role": "system", "content": "You are a coding agent."}, task], "lone")
    assert lone.status_code == 200 and summarizer.calls == 1
    fake.script(Reply.text("recovered"))
    answer = post(proxy, over, "after")
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted"


def test_every_compaction_unavailable_says_when_to_retry(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 2, "base_cooldown_s": 2, "max_cooldown_s": 8}})
    over = over_the_limit()
    first = post(proxy, over, "a")  # one failure: the breaker is still closed
    assert_retry_later(first)
    assert first.headers["retry-after"] == "1"
    opening = post(proxy, over, "b")  # the failure that opens the breaker
    assert_retry_later(opening)
    assert opening.headers["retry-after"] == "2"
    assert "circuit breaker is open" in opening.json()["error"]["message"]
    time.sleep(2.05)
    failed_trial = post(proxy, over, "c")  # the half-open trial fails: cooldown doubled
    assert_retry_later(failed_trial)
    assert failed_trial.headers["retry-after"] == "4"
    assert summarizer.calls == 3
    assert stages(proxy) == ["summarize"] * 3
    # Every one of them ended as a 503: none went on without its compaction, and no request
    # line says it was degraded (forwarded with the cheap stages only) either.
    assert [f["degraded"] for f in proxy.logs.events("compaction_failed")] == [False] * 3
    lines = proxy.requests()
    assert [line["status"] for line in lines] == [503] * 3
    assert [line.get("compaction_degraded") for line in lines] == [None] * 3


def test_a_manual_compact_while_the_breaker_is_open_is_a_503_with_retry_after(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=1)
    proxy = make_proxy(fake, models=MODELS, compaction={**NO_CHEAP,
                                                        "breaker": BREAKER_OPENS_AT_ONCE})
    assert_retry_later(post(proxy, over_the_limit(), "opener"))
    messages, _ = planted_session(40)
    command = [*messages[:21], {"role": "user", "content": "/compact"}]
    assert_retry_later(post(proxy, command, "manual"))
    assert summarizer.calls == 1 and stages(proxy) == ["summarize", "breaker_open"]


# ------------------------------------------------------------------ the checkpoint


def _history_ids(proxy) -> list[str]:
    history = HistoryFiles.under(proxy.settings.state.path)
    files = sorted(Path(history.root).glob("*.jsonl")) if history.root.exists() else []
    return [r["record"]["id"] for path in files for r in history.read(path).records]


def test_a_checkpoint_that_cannot_be_written_is_a_visible_failure(make_fake, make_proxy,
                                                                 monkeypatch) -> None:
    # The breaker must still be open at the third request: its clock moves only when the test
    # moves it (0.3 s of cooldown failed on two busy cores, and 2 s is no bound either).
    now = [1_000.0]
    monkeypatch.setattr(breakers, "clock", lambda: now[0])
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 2, "base_cooldown_s": 2}})
    store = proxy.app[SERVICES].pipeline.store

    async def disk_full(*args: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    store.add_event = disk_full
    fake.script(Reply.text("forwarded"))
    fits = post(proxy, between_trigger_and_limit(), "disk")
    assert fits.status_code == 200 and fits.headers["x-compaction"] != "compacted"
    over = over_the_limit()
    assert_retry_later(post(proxy, over, "disk"))
    assert stages(proxy) == ["checkpoint", "checkpoint"]
    assert "database or disk is full" in proxy.logs.events("compaction_failed")[0]["error"]
    assert [r.get("compaction_failed") for r in proxy.requests()] == ["checkpoint"] * 2
    assert metric(proxy, "failed_checkpoint") == 2.0
    assert _history_ids(proxy) == [], "history lines kept for a checkpoint never written"
    assert_retry_later(post(proxy, over, "disk"))  # two failures opened the breaker
    assert len(proxy.logs.events("compaction_started")) == 2
    assert stages(proxy)[-1] == "breaker_open"

    del store.add_event  # the disk has room again
    now[0] += 2.05
    fake.script(Reply.text("compacted at last"))
    answer = post(proxy, over, "disk")
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"
    ids = _history_ids(proxy)
    assert ids and len(ids) == len(set(ids)), "the retry offloaded the same messages twice"


def test_a_client_gone_while_the_checkpoint_is_written_leaves_it_whole(make_fake,
                                                                        make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    store = proxy.app[SERVICES].pipeline.store
    write = store.add_event

    async def slow_disk(*args: Any) -> Any:
        await asyncio.sleep(0.6)
        return await write(*args)

    store.add_event = slow_disk
    over = over_the_limit()
    with pytest.raises(httpx.TimeoutException):
        post(proxy, over, "slow-disk", timeout=0.3)
    wait_for(lambda: proxy.logs.events("compaction_completed"))
    assert "cancelled" not in stages(proxy)
    calls = summarizer.calls
    fake.script(Reply.text("ok"))
    answer = post(proxy, over, "slow-disk")
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "applied"
    assert summarizer.calls == calls, "the checkpoint was lost"
    ids = _history_ids(proxy)
    assert ids and len(ids) == len(set(ids))


# ------------------------------------------------------------------ another model's window


def test_a_thread_moved_to_a_smaller_model_compacts_for_that_window(make_fake,
                                                                    make_proxy) -> None:
    fake = make_fake(limits={"small-*": 200_000, "tiny-*": 200_000})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 30_000},
                                     "tiny-*": {"max_input_tokens": 7_000}})
    messages, _ = planted_session(200, seed=3)
    turns = [k for k in range(100, len(messages)) if messages[k]["role"] == "assistant"]
    for k in turns:
        fake.script(Reply.text("ok"))
        answer = post(proxy, messages[:k], "moved")
        assert answer.status_code == 200, answer.text
        if answer.headers["x-compaction"] == "compacted":
            break
    else:
        raise AssertionError("the thread never compacted on the larger model")
    fake.script(Reply.text("ok"), Reply.text("ok"))
    fresh = post(proxy, messages[:k], "fresh", model="tiny-coder")
    assert fresh.status_code == 200, fresh.text
    moved = post(proxy, messages[:k], "moved", model="tiny-coder")
    assert moved.status_code == 200, moved.text
    assert moved.headers["x-compaction"] == "compacted"
