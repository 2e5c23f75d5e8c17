"""Requests on one thread that arrive while its compaction runs: an agent's retry, two tabs.

One compaction per thread at a time: the others wait for it and share its outcome. A
checkpoint it wrote serves them; a summary that failed is not repeated at once by each request
that queued behind it (each would wait out the summarizer's timeout again, and the burst alone
would open the breaker every thread shares).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from proxy.threads import tenant_digest
from tests.compaction_session import LIMIT, planted_session, summary_of
from tests.conftest import API_KEY
from tests.test_compaction_detached import COMPACTION, GatedFake, gated, open_gate  # noqa: F401
from tests.test_compaction_failure_paths import (assert_retry_later, between_trigger_and_limit,
                                                 over_the_limit, post, stages, wait_for)
from tests.test_compaction_failures import MODELS, _main_requests, _prefix


def waiting(proxy, thread: str) -> int:
    """How many requests of `thread` (under the tests' credential) wait for its lock."""
    key = ThreadKey(tenant_digest({"authorization": f"Bearer {API_KEY}"}), thread)
    return proxy.app[SERVICES].pipeline.compactor.turns.waiting(key)


def second_waits(loop_thread, gated: GatedFake, proxy, first: list, later: list,
                 thread: str) -> list[httpx.Response]:
    """`first` holds the thread's compaction at the gate while `later` waits at the thread's
    lock; then the gate opens. The two answers, in that order."""
    return queued_behind(loop_thread, gated, proxy, first, [later], thread)


def queued_behind(loop_thread, gated: GatedFake, proxy, first: list, later: list[list],
                  thread: str) -> list[httpx.Response]:
    """`first` holds the thread's compaction at the gate while each of `later` queues at the
    thread's lock, in order; then the gate opens. The answers, in that order."""
    with ThreadPoolExecutor(1 + len(later)) as pool:
        answers = [pool.submit(post, proxy, first, thread)]
        wait_for(lambda: gated.summarizer_requests >= 1)
        for n, messages in enumerate(later, 1):
            answers.append(pool.submit(post, proxy, messages, thread))
            wait_for(lambda n=n: waiting(proxy, thread) == n)
        open_gate(loop_thread, gated)
        return [a.result() for a in answers]


def test_two_tabs_on_one_thread_share_one_compaction_and_its_history(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    messages, _ = planted_session(200)
    first = _prefix(messages, int(LIMIT * 1.05), LIMIT * 2)
    later = messages[:len(first) + 2]  # the other tab is one exchange further
    gated.script(Reply.text("first tab"), Reply.text("second tab"), *[Reply.text("more")] * 2)
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(post, proxy, first, "tabs")
        wait_for(lambda: gated.summarizer_requests >= 1)
        b = pool.submit(post, proxy, later, "tabs")
        wait_for(lambda: waiting(proxy, "tabs") == 1)  # at the thread's lock
        assert gated.summarizer_requests == 1
        open_gate(loop_thread, gated)
        answers = [a.result(), b.result()]
    assert [r.status_code for r in answers] == [200, 200]
    assert [r.headers["x-compaction"] for r in answers] == ["compacted", "applied"]
    [started] = proxy.logs.events("compaction_started")
    assert summarizer.calls == started["summarizer_calls"]
    [completed] = proxy.logs.events("compaction_completed")
    lines = sorted(proxy.requests(), key=lambda r: r.get("compaction_reused") or 0)
    assert [r.get("checkpoint") for r in lines] == [completed["seq"]] * 2
    assert lines[1]["compaction_reused"] == completed["seq"]
    for request in _main_requests(gated):
        assert summary_of(request.body) is not None, "a tab went up without the summary"
    # The checkpoint accounts for the history file exactly: each summarized message once.
    store = proxy.app[SERVICES].pipeline.store
    [event] = loop_thread.run(store.events(ThreadKey(lines[0]["tenant"], "tabs")))
    history = Path(event.history_file)
    assert history.stat().st_size == event.history_end
    assert len(history.read_bytes().splitlines()) == started["summarized_messages"]
    # Each tab's answer left an anchor for its own projection: the next turn of either is
    # estimated from one, as closely as the estimate's margin allows.
    for sent, answer in ((first, answers[0]), (later, answers[1])):
        reply = answer.json()["choices"][0]["message"]
        follow = post(proxy, [*sent, {"role": "assistant", "content": reply["content"]},
                              {"role": "user", "content": "go on"}], "tabs")
        assert follow.status_code == 200
        line = proxy.requests()[-1]
        assert line["anchor_used"] is True and line["checkpoint"] == completed["seq"]
        upstream = chat_prompt_tokens(_main_requests(gated)[-1].json)
        margin = proxy.settings.tokens.safety_margin  # the estimate stays at or above it
        assert upstream <= line["tokens_estimate"] <= upstream * (1 + margin + 0.01)


# How a summarizer fails (the fake's option), and words of the reason the client is told. The
# summarizer's timeout runs from its request, held at the gate until the queue has formed:
# long enough for a loaded machine to form it.
TIMEOUT_S = 3
FAILURES = [("fail", "summarizer overloaded"), ("cut_short", "cut short"),
            ("hang", f"did not answer within {TIMEOUT_S}s")]


@pytest.mark.parametrize(("failure", "said"), FAILURES, ids=[f for f, _ in FAILURES])
def test_requests_queued_behind_a_failed_summary_share_its_failure(
        loop_thread, gated: GatedFake, make_proxy, failure: str, said: str) -> None:
    # Failing every time: the breaker would open at its default third failure.
    summarizer = FakeSummarizer.install(gated, **{failure: 100})
    proxy = make_proxy(gated, models=MODELS, compaction={**COMPACTION,
                                                         "summarizer": {"timeout_s": TIMEOUT_S}})
    over = over_the_limit()
    answers = queued_behind(loop_thread, gated, proxy, over, [over, over], "queue")
    assert summarizer.calls == 1, "a queued request repeated the summary that had just failed"
    for answer in answers:
        assert_retry_later(answer)
    assert said in answers[1].json()["error"]["message"]
    failed = proxy.logs.events("compaction_failed")
    assert sorted(f["stage"] for f in failed) == ["summarize"] * 3
    assert sum(bool(f.get("shared")) for f in failed) == 2
    assert not _main_requests(gated)
    # One failure for the breaker, not three: it is still closed for the next request.
    gated.script(Reply.text("recovered"))
    setattr(summarizer, failure, 0)
    answer = post(proxy, over, "queue")
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"


def test_a_queued_request_that_fits_goes_on_after_the_failure_it_waited_for(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated, fail=100)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    between = between_trigger_and_limit()
    gated.script(Reply.text("ok"), Reply.text("ok"))
    answers = second_waits(loop_thread, gated, proxy, between, between, "fits")
    assert [a.status_code for a in answers] == [200, 200]
    assert summarizer.calls == 1
    assert stages(proxy) == ["summarize", "summarize"]
    shared = [r for r in proxy.requests() if r.get("compaction_shared")]
    assert len(shared) == 1 and shared[0]["compaction_degraded"] == "summarize"


def _compact_twice(loop_thread, gated: GatedFake, proxy, thread: str) -> list[httpx.Response]:
    messages, _ = planted_session(40)
    command = [*messages[:21], {"role": "user", "content": "/compact"}]
    return second_waits(loop_thread, gated, proxy, command, command, thread)


def test_compact_sent_twice_at_once_compacts_once(loop_thread, gated: GatedFake,
                                                  make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    answers = _compact_twice(loop_thread, gated, proxy, "twice")
    assert [a.status_code for a in answers] == [200, 200]
    assert [a.headers["x-compaction"] for a in answers] == ["compacted", "none"]
    assert "Nothing new to compact" in answers[1].json()["choices"][0]["message"]["content"]
    [started] = proxy.logs.events("compaction_started")
    assert summarizer.calls == started["summarizer_calls"]
    assert not _main_requests(gated)


def test_compact_sent_twice_at_once_shares_the_summarys_failure(loop_thread, gated: GatedFake,
                                                                make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated, fail=100)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    answers = _compact_twice(loop_thread, gated, proxy, "twice-failed")
    for answer in answers:
        assert_retry_later(answer)
        assert "The conversation is unchanged" in answer.json()["error"]["message"]
    assert summarizer.calls == 1
    assert [bool(f.get("shared")) for f in proxy.logs.events("compaction_failed")] == [
        False, True]


def test_a_tab_that_waited_and_is_still_over_the_limit_is_refused_not_forwarded(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    """The other tab's new message is so long that, on the checkpoint the first one wrote, it
    is over the limit yet below the hysteresis' re-arm point: the clear 400 a request that did
    not wait gets, and nothing over the limit goes upstream (SPEC §5, §9)."""
    FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction={
        **COMPACTION, "trigger_ratio": 0.9, "rearm_ratio": 1.0})
    first = over_the_limit()
    long_task = "".join(f"requirement {i:04d}: keep this line\n" for i in range(1250))
    later = [*first, {"role": "assistant", "content": "done"},
             {"role": "user", "content": long_task}]  # about 12,500 tokens more
    gated.script(Reply.text("first tab"))
    answers = second_waits(loop_thread, gated, proxy, first, later, "long-tab")
    assert answers[0].status_code == 200
    assert answers[1].status_code == 400, answers[1].text
    assert answers[1].json()["error"]["code"] == "context_compaction_insufficient"
    assert "hysteresis" in answers[1].json()["error"]["message"]
    [main] = _main_requests(gated)  # the first tab's only
    assert chat_prompt_tokens(main.json) <= LIMIT
    refused = [r for r in proxy.requests() if r["status"] == 400]
    assert refused[0]["compaction_failed"] == "hysteresis" and refused[0]["compaction_reused"]
