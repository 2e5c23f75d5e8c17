"""Requests of one thread queued behind a compaction refused by its content alone, before any
summarizer call (a plan over `compaction.summarizer.max_calls`): only a request with the same
inputs shares the refusal; one that differs (another model, other messages) runs its own
compaction, and the summarizer's breaker never counts a refusal it was not asked about.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session
from tests.test_compaction_detached import COMPACTION, GatedFake, gated, open_gate  # noqa: F401
from tests.test_compaction_failure_paths import over_the_limit, post, wait_for
from tests.test_compaction_failures import _prefix
from tests.test_compaction_summarizer_calls import TINY, _over_the_trigger
from tests.test_concurrency_post_check import TOO_LONG, far_over_the_limit
from tests.test_concurrency_same_thread import waiting

# A tiny model's window cuts the summary of its request into more chunks than allowed.
MODELS = {"small-*": {"max_input_tokens": LIMIT}, "tiny-*": {"max_input_tokens": TINY}}
BOUNDED = {**COMPACTION, "summarizer": {"timeout_s": 30, "max_calls": 2}}


def other_session_to_compact() -> list[dict[str, Any]]:
    """Over the trigger, under the limit, from messages the first request's checkpoint does not
    cover: it still needs its own summary once that checkpoint is written."""
    messages, _ = planted_session(200, seed=5)
    return _prefix(messages, 12_600, 14_500)


def _queue_behind(loop_thread, gated: GatedFake, proxy, thread: str,
                  waiters: list[tuple[list[dict[str, Any]], str]]) -> list[httpx.Response]:
    """A first request holds the thread's compaction at the gate while `waiters` (messages,
    model) queue at the thread's lock in that order; then the gate opens. Their answers."""
    with ThreadPoolExecutor(1 + len(waiters)) as pool:
        first = pool.submit(post, proxy, over_the_limit(), thread)
        wait_for(lambda: gated.summarizer_requests >= 1)
        queued = []
        for n, (messages, model) in enumerate(waiters, start=1):
            queued.append(pool.submit(post, proxy, messages, thread, model=model))
            wait_for(lambda n=n: waiting(proxy, thread) == n)  # FIFO: the lock's order
        open_gate(loop_thread, gated)
        assert first.result().headers["x-compaction"] == "compacted"
        return [q.result() for q in queued]


def test_a_request_that_differs_does_not_share_a_refusal_over_max_calls(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=BOUNDED)
    gated.script(*[Reply.text("ok")] * 3)
    tiny, other = _queue_behind(loop_thread, gated, proxy, "bounded", [
        (_over_the_trigger(TINY), "tiny-coder"), (other_session_to_compact(), "small-coder")])
    assert tiny.status_code == 200, tiny.text  # degraded: it fits its model
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], bool(f.get("shared"))) for f in failed] == [("summarize", False)]
    assert "compaction.summarizer.max_calls (2)" in failed[0]["error"]
    assert other.status_code == 200, other.text
    assert other.headers["x-compaction"] == "compacted", "it shared another request's refusal"
    started = proxy.logs.events("compaction_started")
    assert len(started) == 2 and len(proxy.logs.events("compaction_completed")) == 2
    assert summarizer.calls == sum(s["summarizer_calls"] for s in started)


def test_the_same_request_shares_a_refusal_over_max_calls(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=BOUNDED)
    gated.script(*[Reply.text("ok")] * 3)
    request = _over_the_trigger(TINY)
    answers = _queue_behind(loop_thread, gated, proxy, "bounded-twice",
                            [(request, "tiny-coder"), (request, "tiny-coder")])
    assert [a.status_code for a in answers] == [200, 200]
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], bool(f.get("shared"))) for f in failed] == [
        ("summarize", False), ("summarize", True)]
    assert len(proxy.logs.events("compaction_started")) == 1  # the first request's only


def test_the_same_request_over_the_limit_shares_the_400_over_max_calls(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    """Refused before any call and refused alike on every retry: a 400 without `Retry-After`,
    the queued retry's the same, without a plan of its own."""
    FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=BOUNDED)
    gated.script(Reply.text("ok"))
    request = far_over_the_limit()
    answers = _queue_behind(loop_thread, gated, proxy, "bounded-over",
                            [(request, "tiny-coder"), (request, "tiny-coder")])
    assert [a.status_code for a in answers] == [400, 400]
    assert answers[0].json() == answers[1].json()
    error = answers[0].json()["error"]
    assert error["code"] == "context_compaction_insufficient"
    assert "compaction.summarizer.max_calls (2)" in error["message"]
    assert all("retry-after" not in a.headers for a in answers)
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], bool(f.get("shared"))) for f in failed] == [
        ("summarize", False), ("summarize", True)]
    assert len(proxy.logs.events("compaction_started")) == 1  # the first request's only


@pytest.fixture
def unlimited(loop_thread) -> Iterator[GatedFake]:
    """A gated fake that refuses nothing as too long: a padded summary carried into the next
    step of a chunked summary still reaches the post-check."""
    fake = GatedFake()
    loop_thread.run(fake.start())
    yield fake
    open_gate(loop_thread, fake)
    loop_thread.run(fake.stop())


def test_a_retry_shares_its_post_check_though_another_request_was_refused_since(
        loop_thread, unlimited: GatedFake, make_proxy) -> None:
    """The first request's summary fails the post-check; a request with another model is then
    refused before the summarizer; the first one's retry, queued behind both, still gets the
    first one's 400 without a summary of its own."""
    gated = unlimited
    summarizer = FakeSummarizer.install(gated, padding=TOO_LONG)
    # Three calls summarize the request for the small model; the tiny one's would take 24.
    proxy = make_proxy(gated, models=MODELS, compaction={
        **BOUNDED, "summarizer": {"timeout_s": 30, "max_calls": 3}})
    request = far_over_the_limit()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(post, proxy, request, "retry-behind")
        wait_for(lambda: gated.summarizer_requests >= 1)
        tiny = pool.submit(post, proxy, request, "retry-behind", model="tiny-coder")
        wait_for(lambda: waiting(proxy, "retry-behind") == 1)
        retry = pool.submit(post, proxy, request, "retry-behind")
        wait_for(lambda: waiting(proxy, "retry-behind") == 2)
        open_gate(loop_thread, gated)
        answers = [first.result(), tiny.result(), retry.result()]
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert "compaction.summarizer.max_calls (3)" in answers[1].json()["error"]["message"]
    assert "retry-after" not in answers[1].headers
    assert answers[2].json() == answers[0].json()
    [started] = proxy.logs.events("compaction_started")  # the first request's only
    assert summarizer.calls == started["summarizer_calls"]
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], bool(f.get("shared"))) for f in failed] == [
        ("post_check", False), ("summarize", False), ("post_check", True)]
