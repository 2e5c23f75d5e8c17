"""The fake's `n`: as many choices as asked, each a sample of its own (its text told apart, its
tool calls with ids of their own), the usage counting every choice's output; streamed, the
choices' chunks interleave. Out-of-range and mistyped values get OpenAI's refusals. Then the
proxy in front of it: every choice relayed, and the next turn anchored on the one kept."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import tool_result, user
from proxy.testing.replies import Reply, call
from proxy.testing.rules import check_chat
from proxy.testing.turn import completion_tokens, sampled
from tests.harness import COUNTED
from tests.test_fake_openai_client import client

TEXT = "Red is the colour of the first sample."
TOOLS = Reply.tool_calls(call("read_file", {"path": "a.py"}), call("grep", {"pattern": "x"}),
                         content="Reading first.")


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


async def test_each_choice_is_a_sample_and_the_usage_counts_them_all(fake: FakeUpstream) -> None:
    fake.script(Reply.text(TEXT), Reply.text(TEXT))
    async with client(fake) as api:
        one = await api.chat.completions.create(model="gpt-4o", messages=[user("colour?")])
        three = await api.chat.completions.create(model="gpt-4o", messages=[user("colour?")], n=3)
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert [c.message.content for c in three.choices] == [
        TEXT, TEXT + " (sample 2)", TEXT + " (sample 3)"]
    assert all(c.finish_reason == "stop" for c in three.choices)
    assert three.usage is not None and one.usage is not None
    assert three.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt is read once
    outputs = [completion_tokens(r)[0]
               for r in (Reply.text(TEXT), sampled(Reply.text(TEXT), 1), sampled(Reply.text(TEXT), 2))]
    assert three.usage.completion_tokens == sum(outputs) > 3 * one.usage.completion_tokens - 1


async def test_each_choice_calls_with_ids_of_its_own_and_any_one_can_be_answered(
        fake: FakeUpstream) -> None:
    fake.script(TOOLS)
    async with client(fake) as api:
        done = await api.chat.completions.create(model="gpt-4o", messages=[user("look")], n=2)
    first, second = (c.message for c in done.choices)
    assert first.content == "Reading first." and second.content == "Reading first. (sample 2)"
    assert [c.function.name for c in second.tool_calls or ()] == ["read_file", "grep"]
    ids = [c.id for m in (first, second) for c in m.tool_calls or ()]
    assert len(set(ids)) == 4, "every sample's calls have ids of their own"
    assert all(c.finish_reason == "tool_calls" for c in done.choices)
    for kept in (first, second):
        answered = [user("look"), kept.model_dump(exclude_none=True),
                    *(tool_result(c.id, "ok") for c in kept.tool_calls or ())]
        assert check_chat({"model": "gpt-4o", "messages": answered}) is None


@pytest.mark.parametrize("reply", [Reply.text(TEXT), TOOLS], ids=["text", "calls"])
async def test_a_stream_interleaves_the_choices_and_adds_up_to_the_whole_answer(
        fake: FakeUpstream, reply: Reply) -> None:
    fake.script(reply, reply)
    async with client(fake) as api:
        whole = await api.chat.completions.create(model="gpt-4o", messages=[user("go")], n=2)
        stream = await api.chat.completions.create(
            model="gpt-4o", messages=[user("go")], n=2, stream=True,
            stream_options={"include_usage": True})
        chunks = [c async for c in stream]
    indexes = [c.choices[0].index for c in chunks if c.choices]
    assert indexes[:2] == [0, 1], "each choice's role chunk, then their pieces in turn"
    texts, calls, finishes = ["", ""], [{}, {}], [None, None]  # type: ignore[var-annotated]
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            for fragment in choice.delta.tool_calls or ():
                made = calls[choice.index].setdefault(fragment.index, {"name": "", "args": ""})
                made["name"] += fragment.function.name or ""
                made["args"] += fragment.function.arguments or ""
            finishes[choice.index] = choice.finish_reason or finishes[choice.index]
    assert texts == [c.message.content for c in whole.choices]
    assert finishes == [c.finish_reason for c in whole.choices]
    for index, choice in enumerate(whole.choices):
        assert [(m["name"], json.loads(m["args"])) for _, m in sorted(calls[index].items())] == [
            (c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or ()]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert whole.usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_through_the_proxy_the_kept_sample_is_anchored(make_fake, make_proxy, make_client,
                                                       stream: bool) -> None:
    fake = make_fake()
    fake.script(TOOLS, Reply.text("Done."))
    proxy = make_proxy(fake, tokens=COUNTED)
    api = make_client(proxy.base_url)
    thread = {"x-thread-id": "samples"}
    if stream:
        pieces: list[dict[str, Any]] = [{"content": "", "calls": {}}, {"content": "", "calls": {}}]
        for chunk in api.chat.completions.create(model="gpt-4o", messages=[user("look")], n=2,
                                                 stream=True, extra_headers=thread):
            for choice in chunk.choices:
                kept = pieces[choice.index]
                kept["content"] += choice.delta.content or ""
                for fragment in choice.delta.tool_calls or ():
                    made = kept["calls"].setdefault(fragment.index, {
                        "id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                    made["id"] += fragment.id or ""
                    made["function"]["name"] += fragment.function.name or ""
                    made["function"]["arguments"] += fragment.function.arguments or ""
        messages = [{"role": "assistant", "content": p["content"],
                     "tool_calls": [c for _, c in sorted(p["calls"].items())]} for p in pieces]
    else:
        done = api.chat.completions.create(model="gpt-4o", messages=[user("look")], n=2,
                                           extra_headers=thread)
        messages = [c.message.model_dump(exclude_none=True) for c in done.choices]
    kept = messages[1]
    assert kept["content"] == "Reading first. (sample 2)"
    follow = [user("look"), kept, *(tool_result(c["id"], "ok") for c in kept["tool_calls"])]
    answer = api.chat.completions.create(model="gpt-4o", messages=follow, extra_headers=thread)
    assert answer.choices[0].message.content == "Done."
    assert fake.last("/chat/completions").json["messages"] == follow
    assert proxy.requests()[-1]["anchor_used"] is True
