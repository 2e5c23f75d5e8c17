"""The fake's vLLM dialect answers with its reasoning in `reasoning`, the field vLLM renamed
from `reasoning_content` (PROTOCOL.md §4.1, §4.8), plain and streamed; and takes it back."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from proxy.testing.fake_upstream import DEFAULT_TEXT, FakeUpstream
from proxy.testing.messages import tool_result, user
from proxy.testing.replies import Reply, call

THOUGHT = "The file is small; read it whole."


@pytest.mark.parametrize("stream", [False, True])
async def test_vllm_reasoning_comes_back_in_reasoning(stream: bool) -> None:
    async with FakeUpstream(dialect="vllm") as fake, \
            AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as api:
        fake.script(Reply.tool_calls(call("read_file", {"path": "a.py"})).with_reasoning(THOUGHT))
        answer = await api.chat.completions.create(model="m", messages=[user("hi")], stream=stream)
        if stream:
            deltas = [chunk.choices[0].delta.model_dump(exclude_none=True)
                      async for chunk in answer if chunk.choices]
            assert "".join(d.get("reasoning", "") for d in deltas) == THOUGHT
            assert not any("reasoning_content" in d for d in deltas)
            return
        message = answer.choices[0].message.model_dump(exclude_none=True)
        assert message["reasoning"] == THOUGHT and "reasoning_content" not in message
        follow = [user("hi"), message, *(tool_result(c["id"]) for c in message["tool_calls"])]
        done = await api.chat.completions.create(model="m", messages=follow)
    assert done.choices[0].message.content == DEFAULT_TEXT
