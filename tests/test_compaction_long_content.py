"""A summarizer with a window of hundreds of thousands of tokens still gets each step's content
under OpenAI's longest string (1,048,576 characters): a step packed by tokens alone held more,
and the upstream refused it (400 `string_above_max_length`), so the compaction failed."""

from __future__ import annotations

import httpx
import orjson

from proxy.compaction.summarizer import MAX_CONTENT_CHARS
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.conftest import API_KEY

WINDOW = 700_000  # the model's and so the summarizer's: 630k tokens of transcript a step


def _session() -> list[dict[str, object]]:
    """A coding session of some 2.6 million characters, most of them indented code."""
    code = "".join(f"    value_{n} = compute(value_{n - 1})  # step\n" for n in range(1, 400))
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Port the module to the new API."}]
    for i in range(150):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": code})
    messages.append({"role": "user", "content": "Now run the tests."})
    return messages


def test_a_huge_summarizer_window_still_sends_steps_under_the_longest_string(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"huge-*": WINDOW})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"huge-*": {"max_input_tokens": WINDOW}})
    messages = _session()
    assert len(orjson.dumps(messages)) > 2 * MAX_CONTENT_CHARS
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=120,
                        content=orjson.dumps({"model": "huge-1", "messages": messages}),
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "t-huge",
                                 "content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted"
    steps = [r.json for r in fake.requests if is_summarizer_request(r.json)]
    assert len(steps) >= 2
    for step in steps:
        assert all(len(m["content"]) <= MAX_CONTENT_CHARS for m in step["messages"])
    assert proxy.logs.events("compaction_completed")
    assert not proxy.logs.events("compaction_failed")
