"""The official `openai` client against the fake, sync and async, stream and not, per dialect."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from proxy.testing.background import running_in_thread
from proxy.testing.fake_upstream import DEFAULT_TEXT, FakeUpstream
from proxy.testing.messages import tool_result, user
from proxy.testing.replies import Reply, call

TOOLS_REPLY = Reply.tool_calls(call("read_file", {"path": "a.py"}), call("grep", {"pattern": "x"}))


def client(fake: FakeUpstream, **options: Any) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0, **options)


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(limits={"small-*": 200}) as upstream:
        yield upstream


async def test_async_client_plain_and_streamed(fake: FakeUpstream) -> None:
    async with client(fake) as api:
        done = await api.chat.completions.create(model="gpt-4o", messages=[user("hi")])
        assert done.choices[0].message.content == DEFAULT_TEXT
        assert done.usage is not None and done.usage.completion_tokens > 0
        stream = await api.chat.completions.create(model="gpt-4o", messages=[user("hi")], stream=True,
                                                   stream_options={"include_usage": True})
        chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DEFAULT_TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == done.usage.total_tokens


def test_sync_client_plain_and_streamed() -> None:
    with running_in_thread() as fake, OpenAI(base_url=fake.url, api_key="x", max_retries=0) as api:
        fake.script(Reply.text("sync hello"))
        done = api.chat.completions.create(model="gpt-4o", messages=[user("hi")])
        assert done.choices[0].message.content == "sync hello"
        stream = api.chat.completions.create(model="gpt-4o", messages=[user("hi")], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream) == DEFAULT_TEXT
        models = [m.id for m in api.models.list()]
        assert "fake-model" in models


def test_sync_responses_api() -> None:
    with running_in_thread() as fake, OpenAI(base_url=fake.url, api_key="x", max_retries=0) as api:
        assert api.responses.create(model="gpt-5", input="hi").output_text == DEFAULT_TEXT
        events = [e.type for e in api.responses.create(model="gpt-5", input="hi", stream=True)]
        assert events[0] == "response.created" and events[-1] == "response.completed"


async def test_streamed_tool_calls_round_trip(fake: FakeUpstream) -> None:
    fake.script(TOOLS_REPLY)
    async with client(fake) as api:
        stream = await api.chat.completions.create(model="gpt-4o", messages=[user("hi")], stream=True)
        message = await accumulate(stream)
        follow = [user("hi"), message] + [tool_result(c["id"]) for c in message["tool_calls"]]
        done = await api.chat.completions.create(model="gpt-4o", messages=follow)
    assert done.choices[0].finish_reason == "stop"
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["read_file", "grep"]


async def accumulate(stream: Any) -> dict[str, Any]:
    """An assistant message rebuilt from chunks, keeping provider extras (what agents do)."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta.model_dump(exclude_none=True)
        for key in ("content", "reasoning_content", "reasoning"):
            if key in delta:
                message[key] = (message.get(key) or "") + delta[key]
        if "reasoning_details" in delta:
            message["reasoning_details"] = delta["reasoning_details"]
        for fragment in delta.get("tool_calls") or ():
            entry = calls.setdefault(fragment["index"], {"function": {"arguments": ""}})
            entry.update({k: v for k, v in fragment.items() if k not in ("index", "function")})
            function = fragment.get("function") or {}
            entry["function"]["name"] = function.get("name", entry["function"].get("name"))
            entry["function"]["arguments"] += function.get("arguments", "")
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


@pytest.mark.parametrize("dialect", ["openai", "deepseek-thinking", "openrouter", "gemini",
                                     "cerebras", "openai-strict", "mistral", "vllm"])
@pytest.mark.parametrize("stream", [False, True])
async def test_exact_echo_passes_every_dialect(dialect: str, stream: bool) -> None:
    async with FakeUpstream(dialect=dialect) as fake, client(fake) as api:
        fake.script(TOOLS_REPLY.with_reasoning("Let me look."))
        answer = await api.chat.completions.create(model="m", messages=[user("hi")], stream=stream)
        if stream:
            message = await accumulate(answer)
        else:
            message = answer.choices[0].message.model_dump(exclude_none=True)
            if dialect in ("openai-strict", "cerebras"):  # strict upstreams: send only what they accept
                message.pop("annotations", None)
        if dialect == "openai-strict":
            message = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
        follow = [user("hi"), message] + [tool_result(c["id"]) for c in message["tool_calls"]]
        if dialect == "mistral":
            follow.append({"role": "assistant", "content": "noted"})
        done = await api.chat.completions.create(model="m", messages=follow + [user("thanks")]
                                                 if dialect != "mistral" else follow)
    assert done.choices[0].message.content == DEFAULT_TEXT


async def test_dialects_issue_their_private_state() -> None:
    async with FakeUpstream(dialect="deepseek-thinking") as fake, client(fake) as api:
        fake.script(TOOLS_REPLY)
        message = (await api.chat.completions.create(model="m", messages=[user("hi")])).choices[0].message
        assert isinstance(message.model_extra["reasoning_content"], str)  # always reasons
    async with FakeUpstream(dialect="gemini") as fake, client(fake) as api:
        fake.script(TOOLS_REPLY)
        message = (await api.chat.completions.create(model="m", messages=[user("hi")])).choices[0].message
        calls = [c.model_dump(exclude_none=True) for c in message.tool_calls or ()]
        assert "thought_signature" in calls[0]["extra_content"]["google"]
        assert "extra_content" not in calls[1]  # only the first parallel call is signed
    async with FakeUpstream(dialect="openrouter") as fake, client(fake) as api:
        fake.script(Reply.text("hey", reasoning="The user greets."))
        message = (await api.chat.completions.create(model="m", messages=[user("hi")])).choices[0].message
        assert message.model_extra["reasoning"] == "The user greets."
        assert message.model_extra["reasoning_details"][0]["signature"]
        fake.script(TOOLS_REPLY)  # Claude with thinking enabled: every answer thinks first
        message = (await api.chat.completions.create(model="m", messages=[user("hi")])).choices[0].message
        assert message.model_extra["reasoning_details"][0]["signature"]
    async with FakeUpstream(dialect="vllm") as fake, client(fake) as api:
        fake.script(TOOLS_REPLY)
        message = (await api.chat.completions.create(model="m", messages=[user("hi")])).choices[0].message
        assert all(c.id.startswith("chatcmpl-tool-") for c in message.tool_calls or ())


async def test_dropped_private_state_is_rejected_through_the_client() -> None:
    async with FakeUpstream(dialect="deepseek-thinking") as fake, client(fake) as api:
        fake.script(TOOLS_REPLY)
        message = (await api.chat.completions.create(model="m", messages=[user("hi")])).choices[0].message
        echoed = message.model_dump(exclude_none=True)
        del echoed["reasoning_content"]
        follow = [user("hi"), echoed] + [tool_result(c["id"]) for c in echoed["tool_calls"]]
        with pytest.raises(openai.BadRequestError, match="must be passed back"):
            await api.chat.completions.create(model="m", messages=follow)


async def test_errors_arrive_as_the_clients_exceptions(fake: FakeUpstream) -> None:
    async with client(fake, timeout=0.5) as api:
        with pytest.raises(openai.BadRequestError) as overflow:
            await api.chat.completions.create(model="small-x", messages=[user("many words " * 200)])
        assert overflow.value.code == "context_length_exceeded"
        fake.script(Reply.stream_error(after=2))
        stream = await api.chat.completions.create(model="gpt-4o", messages=[user("hi")], stream=True)
        with pytest.raises(openai.APIError, match="server had an error"):
            async for _ in stream:
                pass
        fake.script(Reply.hang())
        with pytest.raises(openai.APITimeoutError):
            await api.chat.completions.create(model="gpt-4o", messages=[user("hi")])


async def test_embeddings_through_the_client(fake: FakeUpstream) -> None:
    async with client(fake) as api:
        result = await api.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(result.data) == 2 and len(result.data[0].embedding) == 1536
