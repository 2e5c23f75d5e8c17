"""A summary that leaves the context no smaller is a failed summary (SPEC §5), handled as the
other summarizer failures are (SPEC §9): the request goes on with the cheap stages while it
fits, else a 503 to retry, and the breaker counts it. Not a 400 asking for a new thread."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from proxy.compaction import postcheck
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.conftest import API_KEY
from tests.test_compaction_failures import MODELS, NO_CHEAP, _main_requests, _prefix

BABBLE = 9_000  # words of padding: a summary longer than what it replaces


def _post(proxy, messages: list[dict[str, Any]], thread: str) -> httpx.Response:
    body = orjson.dumps({"model": MODEL, "messages": messages})
    return httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               "authorization": f"Bearer {API_KEY}"})


def test_a_summary_no_smaller_degrades_a_request_that_fits_and_opens_the_breaker(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, padding=BABBLE)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 2, "base_cooldown_s": 60}})
    messages, _ = planted_session(200)
    between = _prefix(messages, 12_600, 14_500)  # over the trigger, under the limit
    for _ in range(3):
        fake.script(Reply.text("ok"))
        answer = _post(proxy, between, "babble")
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-compaction"] == "none"
    assert summarizer.calls == 2, "the breaker did not count the useless summaries"
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], f["degraded"]) for f in failed] == [
        ("summarize", True), ("summarize", True), ("breaker_open", True)]
    assert "did not make the context smaller" in failed[0]["error"]
    assert len(_main_requests(fake)) == 3


def test_a_summary_no_smaller_over_the_limit_is_a_503_to_retry(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake, padding=2 * BABBLE)
    # A summarizer with a large window: the whole prefix in one call, so its answer decides.
    proxy = make_proxy(fake, models={**MODELS, "big-*": {"max_input_tokens": 200_000}},
                       compaction={**NO_CHEAP, "summarizer": {"model": "big-summarizer"}})
    messages, _ = planted_session(200)
    answer = _post(proxy, _prefix(messages, int(LIMIT * 1.05), LIMIT * 2), "babble-over")
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "compaction_unavailable"
    assert int(answer.headers["retry-after"]) >= 1
    failed = proxy.logs.events("compaction_failed")
    assert [f["stage"] for f in failed] == ["summarize"]
    assert "did not make the context smaller" in failed[0]["error"]
    assert not _main_requests(fake)


def test_a_kept_message_over_the_trigger_is_blamed_not_the_summary() -> None:
    common = dict(tokens_before=10_000, tokens_after=10_500, trigger=8_000, limit=12_000,
                  summary_tokens=700, restore_tokens=0)
    grew = postcheck.check_projection(**common, tail_sizes=[500, 300])
    assert (grew.stage, grew.summary_grew) == (postcheck.SUMMARY, True)
    huge_tail = postcheck.check_projection(**common, tail_sizes=[9_000])
    assert not huge_tail.ok and not huge_tail.summary_grew
