"""A Cline-shaped agent on Claude with thinking, through OpenRouter's OpenAI-compatible API,
driven live through compaction: the client echoes each assistant message as it came (`reasoning`
and the signed `reasoning_details`), sends tool results as part lists, and moves Anthropic's
`cache_control` markers to its newest user messages every turn (Cline's OpenRouter provider
[MEM]). Claude wants the current loop's thinking back (PROTOCOL.md §4.5): the first compacted
request inside a loop learns that with one retry, the thread's later ones send it at once."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from proxy.testing.replies import Reply, call
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.client_shapes import EPHEMERAL, RESTORED, chat_anomalies, with_moving_markers
from tests.conftest import API_KEY

LIMIT = 16_000
LISTING = "".join(f"src/app.py:{j}: def handler_{j}(request): return respond({j})\n" for j in range(150))


def _reply(step: int) -> Reply:
    if step % 8 == 7:
        return Reply.text(f"Task part {step} is done.", reasoning=f"Wrap up step {step}.")
    return Reply.tool_calls(call("read_file", {"path": f"src/mod_{step}.py"}),
                            reasoning=f"Read module {step} next.")


def _drive(proxy: Any, fake: Any, steps: int) -> list[tuple[bytes, bytes]]:
    """Each request's body and the last body the model received for it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": [
        {"type": "text", "text": "You are Cline, a coding agent. " * 120, "cache_control": EPHEMERAL}]}]
    out = []
    with httpx.Client(timeout=60) as client:
        for step in range(steps):
            if step % 8 == 0:
                messages.append({"role": "user", "content": [{"type": "text", "text": f"Task {step}."}]})
            fake.script(_reply(step))
            sent = orjson.dumps({"model": "small-claude", "messages": with_moving_markers(messages),
                                 "reasoning": {"max_tokens": 2048}})
            before = len(fake.requests)
            answer = client.post(f"{proxy.base_url}/chat/completions", content=sent, headers={
                "content-type": "application/json", "authorization": f"Bearer {API_KEY}",
                "x-thread-id": "cline"})
            assert answer.status_code == 200, answer.text
            main = [r for r in fake.requests[before:] if not is_summarizer_request(r.json)]
            out.append((sent, main[-1].body))
            message = answer.json()["choices"][0]["message"]
            messages.append(message)
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": [{"type": "text", "text": LISTING}]}
                         for c in message.get("tool_calls") or ()]
    return out


def test_a_thinking_thread_through_openrouter_retries_for_its_loop_blocks_once(
        make_fake, make_proxy) -> None:
    fake = make_fake(dialect="openrouter", limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})

    requests = _drive(proxy, fake, 64)

    assert len(proxy.logs.events("compaction_completed")) >= 5
    retried = [line for line in proxy.requests() if line.get("retried")]
    assert [line["retried"] for line in retried] == ["Anthropic requires the loop's thinking blocks"]
    # Said on every request the remembered demand changed, and only there: compacted ones.
    taught = [line for line in proxy.requests() if line.get("retry_lesson")]
    assert taught and all(line.get("checkpoint") for line in taught)
    assert {line["retry_lesson"] for line in taught} == {retried[0]["retried"]}
    for sent, received in requests:
        assert not [p for p in chat_anomalies(sent, received, "openrouter") if p not in RESTORED]

