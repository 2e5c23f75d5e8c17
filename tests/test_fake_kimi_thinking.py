"""The fake's Kimi thinking dialect (PROTOCOL.md §4.1): an assistant message with tool calls
must carry `reasoning_content`, refused in Moonshot's text and envelope, and the fake's answers
carry `reasoning_content` as Kimi's do."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.testing.fake_upstream import DEFAULT_TEXT, FakeUpstream
from proxy.testing.messages import assistant, assistant_calls, system, tool_result, user
from proxy.testing.replies import Reply, call
from proxy.testing.rules import Rejection, check_chat

TOOLS_REPLY = Reply.tool_calls(call("read_file", {"path": "a.py"}))


def _missing_at(index: int) -> Rejection:
    return Rejection(400, {"error": {"type": "invalid_request_error", "message": (
        "thinking is enabled but reasoning_content is missing in assistant tool call message "
        f"at index {index}")}, "type": "error"})


def test_a_tool_call_message_without_reasoning_is_refused_at_its_raw_index() -> None:
    # system, user, assistant-with-calls: the observed second request refused "at index 2".
    messages = [system("s"), user("hi"), assistant_calls("c1"), tool_result("c1")]
    assert check_chat({"messages": messages}, "kimi-thinking") == _missing_at(2)
    messages[2] = assistant_calls("c1", reasoning_content="I read it first.")
    assert check_chat({"messages": messages}, "kimi-thinking") is None


def test_an_earlier_turns_tool_call_message_is_checked_too() -> None:
    messages = [user("hi"), assistant_calls("c1"), tool_result("c1"), assistant("done"),
                user("more"), assistant_calls("c2", reasoning_content="r"), tool_result("c2")]
    assert check_chat({"messages": messages}, "kimi-thinking") == _missing_at(1)


def test_messages_without_tool_calls_need_no_reasoning() -> None:
    messages = [user("hi"), assistant("hello"), user("more")]
    assert check_chat({"messages": messages}, "kimi-thinking") is None
    assert check_chat({"messages": messages}, "deepseek-thinking") is None


def test_pairing_rules_still_apply_before_the_reasoning_rule() -> None:
    found = check_chat({"messages": [user("hi"), tool_result("c1")]}, "kimi-thinking")
    assert found is not None and found.body["error"]["message"].startswith(
        "Invalid parameter: messages with role 'tool'")


def _client(fake: FakeUpstream) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.url, api_key="k", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_echoed_answer_passes_and_a_stripped_one_is_refused(stream: bool) -> None:
    async with FakeUpstream(dialect="kimi-thinking") as fake, _client(fake) as api:
        fake.script(TOOLS_REPLY)
        answer = await api.chat.completions.create(model="kimi-k2", messages=[user("hi")],
                                                   stream=stream)
        message = await _message(answer, stream)
        assert message["reasoning_content"]  # Kimi thinking: every answer reasons first
        follow = [user("hi"), message] + [tool_result(c["id"]) for c in message["tool_calls"]]
        done = await api.chat.completions.create(model="kimi-k2", messages=follow)
        assert done.choices[0].message.content == DEFAULT_TEXT
        stripped = {k: v for k, v in message.items() if k != "reasoning_content"}
        with pytest.raises(openai.BadRequestError, match="reasoning_content is missing") as refused:
            await api.chat.completions.create(model="kimi-k2", messages=[user("hi"), stripped] + follow[2:])
        assert refused.value.body["type"] == "invalid_request_error"


async def _message(answer: Any, stream: bool) -> dict[str, Any]:
    if not stream:
        return answer.choices[0].message.model_dump(exclude_none=True)
    message: dict[str, Any] = {"role": "assistant", "reasoning_content": "", "tool_calls": []}
    async for chunk in answer:
        for choice in chunk.choices:
            delta = choice.delta.model_dump(exclude_none=True)
            message["reasoning_content"] += delta.get("reasoning_content", "")
            for part in delta.get("tool_calls", ()):
                if part.get("id"):
                    message["tool_calls"].append({"id": part["id"], "type": "function",
                                                  "function": {"name": "", "arguments": ""}})
                function = message["tool_calls"][part["index"]]["function"]
                for key in ("name", "arguments"):
                    function[key] += part.get("function", {}).get(key) or ""
    return message
