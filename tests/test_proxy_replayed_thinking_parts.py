"""An assistant message replayed with Anthropic `thinking` content parts, sent by the client to
an OpenAI upstream: OpenAI refuses the part type ("Invalid value: 'thinking'. Supported values
are: ...", quoted by several clients [OBS]); SPEC §7.4 wants one retry with that chain-bound state
stripped: the plain kind and the signed one alike, since OpenAI takes neither."""

from __future__ import annotations

import httpx
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY

PARTS = [
    {"type": "thinking", "thinking": "the user greets me", "signature": "sig-abc"},
    {"type": "thinking", "thinking": "the user greets me"},
    {"type": "redacted_thinking", "data": "opaque-blob"},
]


@pytest.mark.parametrize("part", PARTS, ids=["signed", "unsigned", "redacted"])
def test_a_replayed_thinking_part_gets_the_one_retry_without_it(make_fake, make_proxy,
                                                                 part) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [part, {"type": "text", "text": "Hello."}]},
        {"role": "user", "content": "what is 2 + 2?"},
    ]
    fake = make_fake(dialect="openai-strict")
    proxy = make_proxy(fake)
    fake.script(Reply.text("4"))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "thinking"},
                        json={"model": "gpt-4o", "messages": messages})
    sent = [r for r in fake.requests
            if r.path.endswith("/chat/completions") and not is_summarizer_request(r.json)]
    assert sent[0].json["messages"] == messages  # forwarded as the client sent it (SPEC §7.3)
    assert answer.status_code == 200, answer.text
    assert len(sent) == 2
    assert sent[1].json["messages"][1]["content"] == [{"type": "text", "text": "Hello."}]
    assert sent[1].json["messages"][::2] == messages[::2]
