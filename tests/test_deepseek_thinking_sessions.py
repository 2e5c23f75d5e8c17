"""A DeepSeek thinking-mode agent session through the proxy: every later request must carry the
`reasoning_content` of each earlier turn that made tool calls (DeepSeek's thinking-mode guide), so
the cheap stages and compaction keep it on those messages and the upstream never rejects one."""

from __future__ import annotations

import orjson

from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, replay, thinking_session

MODELS = {"small-*": {"max_input_tokens": LIMIT}}


def test_a_compacted_deepseek_thread_keeps_past_tool_turns_reasoning(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT}, dialect="deepseek-thinking")
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    messages = thinking_session(260, seed=3)

    replay(proxy.base_url, fake, messages, "deepseek")  # asserts every answer is a 200

    assert proxy.logs.events("compaction_completed"), "the session must compact"
    assert not [line for line in proxy.requests() if "retried" in line], "no rejection to retry"
    run_past_calls = 0
    for request in (r for r in fake.requests if not is_summarizer_request(r.json)):
        sent = orjson.loads(request.body)["messages"]
        users = [i for i, m in enumerate(sent) if m["role"] == "user"]
        past_calls = [m for m in sent[:users[-1]] if m.get("tool_calls")]
        assert all(m.get("reasoning_content", "").startswith("thinking before") for m in past_calls)
        run_past_calls += bool(past_calls) and sent != messages[:len(sent)]
    assert run_past_calls, "no projection the proxy changed kept an earlier tool-using turn"
