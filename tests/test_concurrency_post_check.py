"""Requests of one thread queued behind a compaction whose summary came back but failed the
post-check (SPEC §5): the same request (an agent's retry) gets the same answer without a
summary of its own; a request that differs (another tab, one exchange further) runs its own.
"""

from __future__ import annotations

from typing import Any

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session
from tests.test_compaction_detached import COMPACTION, GatedFake, gated  # noqa: F401
from tests.test_compaction_failure_paths import post, stages
from tests.test_compaction_failures import MODELS, _main_requests, _prefix
from tests.test_concurrency_same_thread import _compact_twice, queued_behind, second_waits

# A summarizer with a large window (one call per summary, whose answer decides) and a summary
# longer than the trigger yet shorter than what it replaces: the post-check fails, the
# summarizer did its job (SPEC §5, `projection`/`summary` stages, not a failed summary).
BIG = {**MODELS, "big-*": {"max_input_tokens": 200_000}}
WITH_BIG = {**COMPACTION, "summarizer": {"model": "big-summarizer", "timeout_s": 30}}
TOO_LONG = 12_500  # words of padding: about as many tokens, over the 12,000-token trigger


def far_over_the_limit() -> list[dict[str, Any]]:
    messages, _ = planted_session(300)
    return _prefix(messages, int(LIMIT * 1.8), LIMIT * 2)


def _once(summarizer: FakeSummarizer) -> None:
    """Only the first summary is too long: a second one, if asked for, passes."""
    answer = summarizer.answer

    def first_only(body: dict[str, Any]) -> Reply:
        reply = answer(body)
        summarizer.padding = 0
        return reply

    summarizer.answer = first_only  # type: ignore[method-assign]


def test_retries_queued_behind_a_failed_post_check_share_its_400(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated, padding=TOO_LONG)
    proxy = make_proxy(gated, models=BIG, compaction=WITH_BIG)
    over = far_over_the_limit()
    answers = queued_behind(loop_thread, gated, proxy, over, [over, over], "retry")
    assert summarizer.calls == 1, "a retry repeated the summary that had just failed"
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json() == answers[0].json()
    assert answers[0].json()["error"]["code"] == "context_compaction_insufficient"
    assert stages(proxy) == ["post_check"] * 3
    failed = proxy.logs.events("compaction_failed")
    assert [bool(f.get("shared")) for f in failed] == [False, True, True]
    assert [len(proxy.logs.events(e)) for e in ("compaction_started", "compaction_completed")] \
        == [1, 0]
    lines = sorted(proxy.requests(), key=lambda r: bool(r.get("compaction_shared")))
    assert [(r["compaction_failed"], r.get("compaction_shared")) for r in lines] == [
        ("post_check", None), ("post_check", True), ("post_check", True)]
    assert not _main_requests(gated)
    # Shared while it waited, not remembered: the next request tries again.
    summarizer.padding = 0
    gated.script(Reply.text("recovered"))
    answer = post(proxy, over, "retry")
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"
    assert summarizer.calls == 2


def test_another_tab_queued_behind_a_failed_post_check_runs_its_own(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    summarizer = FakeSummarizer.install(gated, padding=TOO_LONG)
    _once(summarizer)
    proxy = make_proxy(gated, models=BIG, compaction=WITH_BIG)
    messages, _ = planted_session(300)
    first = far_over_the_limit()
    later = messages[:len(first) + 2]  # one exchange further: another cut, another check
    gated.script(Reply.text("second tab"))
    answers = second_waits(loop_thread, gated, proxy, first, later, "tabs")
    assert [a.status_code for a in answers] == [400, 200]
    assert answers[1].headers["x-compaction"] == "compacted"
    assert summarizer.calls == 2
    assert stages(proxy) == ["post_check"]
    assert len(proxy.logs.events("compaction_completed")) == 1


def test_compact_sent_twice_at_once_shares_a_summary_that_did_not_help(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    """Below the trigger, a summary that leaves the thread no smaller fails the post-check and
    `/compact` answers that it kept the thread as it is: the second command gets that answer
    too, from the same summary."""
    summarizer = FakeSummarizer.install(gated, padding=TOO_LONG)
    proxy = make_proxy(gated, models=BIG, compaction=WITH_BIG)
    answers = _compact_twice(loop_thread, gated, proxy, "twice-unchanged")
    assert [a.status_code for a in answers] == [200, 200]
    assert [a.headers["x-compaction"] for a in answers] == ["none", "none"]
    texts = [a.json()["choices"][0]["message"]["content"] for a in answers]
    assert texts[0] == texts[1]
    assert summarizer.calls == 1, "the second /compact repeated the summary"
    assert [bool(f.get("shared")) for f in proxy.logs.events("compaction_failed")] == [
        False, True]


def test_a_retry_whose_overflow_queued_it_behind_a_failed_post_check_shares_it(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    """A profile larger than the model's real window: each copy of the request goes up, the
    upstream's overflow buys each a forced compaction (SPEC §9), and the first one's summary
    leaves the thread no smaller. The copy queued behind it would give its summary the same
    messages to check against the same numbers: it shares the failure (the upstream's own
    error, as the first got) instead of paying for a summary of its own."""
    summarizer = FakeSummarizer.install(gated, padding=2 * TOO_LONG)
    proxy = make_proxy(gated, models={**BIG, "small-*": {"max_input_tokens": 2 * LIMIT}},
                       compaction=WITH_BIG)
    messages, _ = planted_session(300)
    request = _prefix(messages, int(LIMIT * 1.1), int(LIMIT * 1.4))  # under the profile's trigger
    gated.script(*[Reply.text("never sent")] * 4)  # the fake refuses them as too long anyway
    answers = second_waits(loop_thread, gated, proxy, request, request, "overflowing")
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "context_length_exceeded", "the upstream's own"
    assert summarizer.calls == 1, "the forced retry repeated the summary that had just failed"
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], bool(f.get("shared"))) for f in failed] == [
        ("post_check", False), ("overflow_retry", False), ("post_check", True),
        ("overflow_retry", False)]
