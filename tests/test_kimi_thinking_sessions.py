"""Kimi thinking-mode agent sessions through the proxy (PROTOCOL.md §4.1, SPEC §7): the
upstream refuses a tool-call message without `reasoning_content`, so the proxy must keep the
client's plain reasoning inside the current tool loop (§7 rule 2), after a compaction too, and a
client that drops it costs one retry with placeholders (§7 rule 4), not a relayed 400."""

from __future__ import annotations

import orjson

from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, replay, thinking_session
from tests.test_retry_lessons_sessions import _dropped_reasoning
from tests.tool_loop_client import ToolLoopClient

MODELS = {"small-*": {"max_input_tokens": LIMIT}}


def test_a_compacted_kimi_thread_keeps_the_current_loops_reasoning(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT}, dialect="kimi-thinking")
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    messages = thinking_session(260, seed=5)

    replay(proxy.base_url, fake, messages, "kimi")  # asserts every answer is a 200

    assert proxy.logs.events("compaction_completed"), "the session must compact"
    assert not [line for line in proxy.requests() if "retried" in line], "no rejection to retry"
    compacted_loops = 0
    for request in (r for r in fake.requests if not is_summarizer_request(r.json)):
        sent = orjson.loads(request.body)["messages"]
        users = [i for i, m in enumerate(sent) if m["role"] == "user"]
        loop_calls = [m for m in sent[users[-1]:] if m.get("tool_calls")]
        # the client's own text, not a placeholder: the proxy kept what it was sent
        assert all(m["reasoning_content"].startswith("thinking before") for m in loop_calls)
        compacted_loops += bool(loop_calls) and sent != messages[:len(sent)]
    assert compacted_loops, "no compacted projection had a current tool loop to keep"


def test_a_client_that_drops_reasoning_costs_one_retry_with_placeholders(
        make_fake, make_proxy) -> None:
    fake = make_fake(dialect="kimi-thinking")
    proxy = make_proxy(fake)
    client = ToolLoopClient(proxy, fake, _dropped_reasoning)

    assert client.turn() == (200, 1)  # nothing to send back yet
    assert client.turn() == (200, 2)  # refused at index 1, retried with a placeholder
    refused = orjson.loads(fake.requests[1].body)["messages"]
    assert "reasoning_content" not in refused[1]
    retried = orjson.loads(fake.requests[2].body)["messages"]
    assert retried[1]["reasoning_content"] == ""
    assert [line.get("retried") for line in proxy.requests()][1]
