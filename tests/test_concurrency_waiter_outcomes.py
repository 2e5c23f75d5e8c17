"""What a request queued behind its thread's compaction gets when that compaction ends other
than with a plain success: its own client leaves while it waits, the checkpoint cannot be
written, or only its history cannot, the first request's client left before a failure. A waiter
never disturbs the first request's compaction, and never pays for a failure it just saw.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import httpx
import pytest

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.test_compaction_detached import (COMPACTION, GatedFake, ask_and_leave,  # noqa: F401
                                            gated, noticed, open_gate)
from tests.test_compaction_failure_paths import (_history_ids, assert_retry_later,
                                                 over_the_limit, post, stages, wait_for)
from tests.test_compaction_failures import MODELS, _main_requests
from tests.test_concurrency_post_check import BIG, TOO_LONG, WITH_BIG, far_over_the_limit
from tests.test_concurrency_same_thread import second_waits, waiting


def test_a_waiter_whose_client_leaves_does_not_disturb_the_compaction_it_waited_for(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    over = over_the_limit()
    gated.script(Reply.text("first"), Reply.text("after"))
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(post(proxy, over, "stays")))
    first.start()
    wait_for(lambda: gated.summarizer_requests >= 1)
    with pytest.raises(httpx.TimeoutException):  # waits at the lock, then gives up
        post(proxy, over, "stays", timeout=0.5)
    wait_for(lambda: waiting(proxy, "stays") == 0)  # its wait ended with its client
    assert len(answers) == 0 and gated.summarizer_requests == 1
    open_gate(loop_thread, gated)
    first.join(30)
    [answer] = answers
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"
    assert not proxy.logs.events("compaction_failed")
    [started] = proxy.logs.events("compaction_started")
    [completed] = proxy.logs.events("compaction_completed")
    assert "detached" not in completed
    # The next request finds the checkpoint whole; nobody summarized twice.
    again = post(proxy, over, "stays")
    assert again.status_code == 200 and again.headers["x-compaction"] == "applied"
    assert summarizer.calls == started["summarizer_calls"]
    lines = [r for r in proxy.requests() if r.get("thread") == "stays"]
    assert sorted(r["status"] for r in lines) == [200, 200, 499]
    [left] = [r for r in lines if r["status"] == 499]
    assert not left.get("compaction_failed") and not left.get("compacted")
    store = proxy.app[SERVICES].pipeline.store
    [event] = loop_thread.run(store.events(ThreadKey(lines[0]["tenant"], "stays")))
    assert event.seq == completed["seq"]


def test_requests_queued_behind_a_checkpoint_that_could_not_be_written_share_its_failure(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    store = proxy.app[SERVICES].pipeline.store

    async def disk_full(*args: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    store.add_event = disk_full
    over = over_the_limit()
    answers = second_waits(loop_thread, gated, proxy, over, over, "full-disk")
    for answer in answers:
        assert_retry_later(answer)
    assert "database or disk is full" in answers[1].json()["error"]["message"]
    [started] = proxy.logs.events("compaction_started")
    assert summarizer.calls == started["summarizer_calls"]
    assert stages(proxy) == ["checkpoint", "checkpoint"]
    assert [bool(f.get("shared")) for f in proxy.logs.events("compaction_failed")] == [
        False, True]
    assert not _main_requests(gated)
    assert _history_ids(proxy) == [], "history lines kept for a checkpoint never written"
    assert [r.get("compaction_failed") for r in proxy.requests()] == ["checkpoint"] * 2


def _by_sharing(proxy) -> list[dict[str, Any]]:
    """The request lines, the one that shared a failure last."""
    return sorted(proxy.requests(), key=lambda r: bool(r.get("compaction_shared")))


def _retry_of_one_that_left(loop_thread, gated: GatedFake, proxy, over: list,
                            thread: str) -> httpx.Response:
    ask_and_leave(proxy.base_url, over, thread)
    # A far-over request is parsed and planned before the proxy can notice its client left:
    # seconds on a loaded 2-core machine (it once took over 5 in a full run beside benchmarks).
    wait_for(lambda: noticed(proxy.logs.events), timeout=15.0)
    answers: list[httpx.Response] = []
    retry = threading.Thread(target=lambda: answers.append(post(proxy, over, thread)))
    retry.start()
    wait_for(lambda: waiting(proxy, thread) == 1)
    open_gate(loop_thread, gated)
    retry.join(30)
    [answer] = answers
    return answer


def test_the_retry_of_a_client_that_left_shares_its_compactions_failed_summary(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated, fail=100)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    answer = _retry_of_one_that_left(loop_thread, gated, proxy, over_the_limit(), "gone")
    assert_retry_later(answer)
    assert summarizer.calls == 1
    assert stages(proxy) == ["summarize", "summarize"]
    left, retried = _by_sharing(proxy)
    assert (left["status"], left["compaction_failed"]) == (499, "summarize")
    assert (retried["status"], retried["compaction_shared"]) == (503, True)


def test_the_retry_of_a_client_that_left_shares_its_compactions_failed_post_check(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated, padding=TOO_LONG)
    proxy = make_proxy(gated, models=BIG, compaction=WITH_BIG)
    answer = _retry_of_one_that_left(loop_thread, gated, proxy, far_over_the_limit(), "gone")
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "context_compaction_insufficient"
    assert summarizer.calls == 1, "the retry paid for the summary that had just failed"
    assert stages(proxy) == ["post_check", "post_check"]
    left, retried = _by_sharing(proxy)
    assert (left["status"], left["compaction_failed"]) == (499, "post_check")
    assert (retried["status"], retried["compaction_shared"]) == (400, True)


def test_a_request_queued_behind_a_checkpoint_written_without_its_history_reuses_it(
        loop_thread, gated: GatedFake, make_proxy, tmp_path) -> None:
    """The history file cannot be written (SPEC §9: the checkpoint is written all the same,
    with its `offload_error`): a success, which the request that waited reuses."""
    summarizer = FakeSummarizer.install(gated)
    state = tmp_path / "offload-state"
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION, state_path=str(state))
    # Lost while the proxy runs (one that cannot take files at start stops the start).
    (state / "history").rmdir()
    (state / "history").write_text("not a directory: every history append fails")
    over = over_the_limit()
    gated.script(Reply.text("first"), Reply.text("second"))
    answers = second_waits(loop_thread, gated, proxy, over, over, "no-history")
    assert [a.status_code for a in answers] == [200, 200]
    assert [a.headers["x-compaction"] for a in answers] == ["compacted", "applied"]
    [started] = proxy.logs.events("compaction_started")
    assert summarizer.calls == started["summarizer_calls"]
    [completed] = proxy.logs.events("compaction_completed")
    assert completed["history_file"] is None and "NotADirectoryError" in completed[
        "offload_error"]
    assert stages(proxy) == ["offload"]
    assert [r.get("compaction_reused") for r in proxy.requests()].count(completed["seq"]) == 1
