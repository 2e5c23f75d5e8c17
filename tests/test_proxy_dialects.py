"""The proxy's own requests pass every strict chat dialect of the fake (PROTOCOL.md §8.2), before
and after a compaction: it never adds a field a strict upstream refuses (`openai-strict`,
`cerebras`, `deepseek-r1-legacy` reject `reasoning_content`) nor puts a user message right
after a tool message (`mistral`, code 3230). What the client itself sends is its business:
a refused reasoning field gets the one retry without it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.core.repair import INTERRUPTED_NOTE
from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from proxy.testing.rules import check_chat
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, planted_session, replay
from tests.conftest import API_KEY
from tests.session_rig import Clock

STRICT = ("openai-strict", "cerebras", "deepseek-r1-legacy", "mistral")


def _mistral_shaped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session as a Mistral client keeps it: an assistant word between a tool result and
    the next user message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "user" and out and out[-1]["role"] == "tool":
            out.append({"role": "assistant", "content": "Done."})
        out.append(message)
    return out


def _main(fake) -> list[Any]:
    return [r for r in fake.requests
            if r.path.endswith("/chat/completions") and not is_summarizer_request(r.json)]


@pytest.mark.parametrize("dialect", STRICT)
def test_a_compacted_session_passes_the_strict_dialect_without_a_retry(
        make_fake, make_proxy, dialect: str) -> None:
    fake = make_fake(limits={"small-*": LIMIT}, dialect=dialect)
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    pipeline = proxy.app[SERVICES].pipeline
    clock = pipeline.clock = pipeline.compactor.clock = Clock()

    def idle_between_turns(_: int) -> bool:
        clock.now += 7 * 3600  # microcompact clears old results too
        return False

    messages, _ = planted_session(240, seed=5)
    messages = _mistral_shaped(messages)
    assert check_chat({"messages": messages}, dialect) is None, "the client's own history passes"
    run = replay(proxy.base_url, fake, messages, f"strict-{dialect}", stop=idle_between_turns)
    assert set(run.statuses) == {200}
    assert proxy.logs.events("compaction_completed"), "the session must be compacted"
    assert not [line for line in proxy.requests() if "retried" in line]
    assert all(check_chat(r.json, dialect) is None for r in _main(fake))


CALL = {"id": "call_abc", "type": "function", "function": {"name": "read_file",
                                                           "arguments": '{"path":"a.py"}'}}


def test_reasoning_content_the_client_echoes_to_r1_is_dropped_in_the_one_retry(
        make_fake, make_proxy) -> None:
    fake = make_fake(dialect="deepseek-r1-legacy")
    proxy = make_proxy(fake)
    fake.script(Reply.text("read it"))
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "reasoning_content": "I should read it.",
                 "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "r1"},
                        json={"model": "deepseek-reasoner", "messages": messages})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["reasoning_content"]  # R1 still returns it
    first, second = _main(fake)
    assert "reasoning_content" in first.json["messages"][1]
    assert second.json["messages"][1] == {"role": "assistant", "content": None,
                                          "tool_calls": [CALL]}
    assert proxy.requests()[-1]["retried"] == "reasoning_content not accepted"


def test_repairing_an_interrupted_call_passes_mistral(make_fake, make_proxy) -> None:
    """Repair's cancelled result would put the client's user message right after a tool
    message; its assistant note goes between them."""
    fake = make_fake(dialect="mistral")
    proxy = make_proxy(fake)
    call = {**CALL, "id": "abcdefghi"}  # Mistral's 9-character ids
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "user", "content": "never mind, stop"}]
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "m"},
                        json={"model": "mistral-large", "messages": messages})
    assert answer.status_code == 200, answer.text
    (sent,) = _main(fake)
    assert [m["role"] for m in sent.json["messages"]] == ["user", "assistant", "tool", "assistant",
                                                          "user"]
    assert sent.json["messages"][3]["content"] == INTERRUPTED_NOTE
    assert sent.json["messages"][4] == messages[2]
