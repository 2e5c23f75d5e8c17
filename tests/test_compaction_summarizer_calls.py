"""`compaction.summarizer.max_calls` bounds the summarizer calls of one compaction (SPEC §5, §9).

A prefix larger than the summarizer's window is summarized in chunks, and a step the
summarizer refuses as too long is re-planned in halves of its window: without a bound, a huge
prefix or a summarizer much smaller than its profile says could cost dozens of calls for one
compaction. Needing more than the bound is a failed summary, handled as any other: the request
goes on with the cheap stages while it fits, else the clear error; the log says why.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import yaml

from proxy.settings import ConfigError, parse_settings
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import planted_session, task_then_loop
from tests.conftest import API_KEY
from tests.test_compaction_failures import NO_CHEAP

TINY = 7_000  # a window that the summarizer's own output reservation leaves small chunks of


def _settings(summarizer: str):
    text = ("upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"
            f"compaction:\n  summarizer: {summarizer}\n")
    return parse_settings(yaml.safe_load(text), {})


def test_the_bound_is_a_whole_number_of_at_least_one() -> None:
    assert _settings("{}").compaction.summarizer.max_calls == 64
    assert _settings("{max_calls: 5}").compaction.summarizer.max_calls == 5
    for bad in ("0", "-1", "2.5", "many", "true"):
        with pytest.raises(ConfigError) as error:
            _settings(f"{{max_calls: {bad}}}")
        assert [p for p in error.value.problems
                if p.startswith("compaction.summarizer.max_calls")], bad


def _post(proxy, messages: list[dict[str, Any]], thread: str, model: str) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                      content=orjson.dumps({"model": model, "messages": messages}),
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               "authorization": f"Bearer {API_KEY}"})


def _over_the_trigger(window: int) -> list[dict[str, Any]]:
    messages, _ = planted_session(120, seed=3)
    for k in range(1, len(messages)):
        if messages[k]["role"] == "assistant" and (
                0.8 * window < chat_prompt_tokens({"messages": messages[:k]}) < 0.95 * window):
            return messages[:k]
    raise AssertionError("no prefix of that size")


def test_a_plan_over_the_bound_is_a_failed_summary_before_any_call(make_fake,
                                                                    make_proxy) -> None:
    fake = make_fake(limits={"tiny-*": TINY})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"tiny-*": {"max_input_tokens": TINY}}, compaction={
        **NO_CHEAP, "summarizer": {"max_calls": 2}, "breaker": {"failures": 1}})
    request = _over_the_trigger(TINY)
    for attempt in range(2):
        fake.script(Reply.text("ok"))
        answer = _post(proxy, request, "many-chunks", "tiny-coder")
        assert answer.status_code == 200, answer.text  # degraded: it still fits the model
        assert answer.json()["choices"][0]["message"]["content"] == "ok"
    assert summarizer.calls == 0
    failed = proxy.logs.events("compaction_failed")
    # Nothing was asked of the summarizer: its breaker neither counts nor opens.
    assert [(f["stage"], f["degraded"]) for f in failed] == [("summarize", True)] * 2
    assert "compaction.summarizer.max_calls (2)" in failed[0]["error"]
    assert not proxy.logs.events("compaction_started")
    assert proxy.requests()[-1]["compaction_degraded"] == "summarize"


def test_the_bound_also_holds_when_the_summarizer_refuses_steps_as_too_long(make_fake,
                                                                             make_proxy) -> None:
    # The summarizer's profile says 100,000 tokens; its real window is 4,000.
    fake = make_fake(limits={"small-*": 16_000, "summarizer-*": 4_000})
    summarizer = FakeSummarizer.install(fake)  # answers only what the fake's limit lets through
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 16_000},
                                     "summarizer-*": {"max_input_tokens": 100_000}},
                       compaction={**NO_CHEAP, "summarizer": {"model": "summarizer-1",
                                                              "max_calls": 3}})
    request = task_then_loop(task_lines=40, steps=12)  # over the trigger, under the limit
    assert 12_000 < chat_prompt_tokens({"messages": request}) < 16_000
    fake.script(Reply.text("ok"))
    answer = _post(proxy, request, "refused-steps", "small-coder")
    assert answer.status_code == 200, answer.text
    asked = [r for r in fake.requests if is_summarizer_request(r.json)]
    assert len(asked) == 3 and summarizer.calls == 0, "all refused as too long, within the bound"
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], f["degraded"]) for f in failed] == [("summarize", True)]
    assert "compaction.summarizer.max_calls (3)" in failed[0]["error"]
    assert [e["retry_window"] for e in proxy.logs.events("summarizer_overflow")] == [50_000, 25_000]
    assert not proxy.logs.events("compaction_completed")
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert orjson.loads(main[-1].body)["messages"] == request, "forwarded as it came"
