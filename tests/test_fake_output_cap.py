"""The fake stops where the request's output cap runs out, as a model does: `max_completion_tokens`
(else `max_tokens`) on chat, `max_output_tokens` on Responses. Reasoning first, then the text,
then the calls (one cut short keeps the start of its arguments); chat says `finish_reason:
length`, Responses `incomplete` with `max_output_tokens`, the usage counts what was written.
A reply that fits is untouched. Then the proxy in front of it: a cut answer is relayed as it
came and anchors the next turn."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import user
from proxy.testing.reference_tokens import count_text, token_prefix
from proxy.testing.replies import Reply, call
from proxy.testing.turn import capped, completion_tokens
from tests.harness import COUNTED
from tests.test_fake_choices import client, fake  # noqa: F401 - the fixture

LONG = "The first part of a long answer, " + "and then some more words, " * 40
TOOLS = Reply.tool_calls(call("write_file", {"path": "notes.md", "text": "line " * 60}),
                         content="Writing it down.")


def test_a_cap_cuts_reasoning_then_text_then_calls_and_never_half_a_character() -> None:
    reply = Reply.tool_calls(call("read_file", {"path": "é😀" * 10}), content="Reading now.",
                             reasoning="Plan: read the file first.")
    reasoning, text = count_text(reply.reasoning or ""), count_text(reply.content or "")
    only_reasoning = capped(reply, reasoning - 2)
    assert only_reasoning.content is None and only_reasoning.calls == ()
    assert (reply.reasoning or "").startswith(only_reasoning.reasoning or "-")
    with_text = capped(reply, reasoning + text)
    assert with_text.reasoning == reply.reasoning and with_text.content == reply.content
    assert with_text.calls == ()  # the call's name did not fit
    for limit in range(reasoning + text + 3 + count_text("read_file") + 1,
                       completion_tokens(reply)[0]):
        cut = capped(reply, limit)
        assert cut.finish() == "length" and 0 < completion_tokens(cut)[0] <= limit
        assert "\ufffd" not in cut.calls[0].arguments
        assert reply.calls[0].arguments.startswith(cut.calls[0].arguments)
    assert capped(reply, completion_tokens(reply)[0]) is reply
    assert capped(reply, 0) is reply
    assert capped(dataclasses.replace(reply, ignores_cap=True), 1).calls == reply.calls
    assert token_prefix("é😀", 1) == ("é", 1)  # the emoji's bytes span tokens: left out whole


@settings(max_examples=60, deadline=None)
@given(reasoning=st.one_of(st.none(), st.text(min_size=1)), content=st.one_of(st.none(), st.text()),
       arguments=st.lists(st.text(), max_size=3), limit=st.integers(0, 80))
def test_what_a_cap_leaves_is_a_start_of_the_reply_within_the_cap(
        reasoning: str | None, content: str | None, arguments: list[str], limit: int) -> None:
    reply = Reply(content=content, reasoning=reasoning,
                  calls=tuple(call("tool", text) for text in arguments))
    cut = capped(reply, limit)
    if limit == 0 or completion_tokens(reply)[0] <= limit:
        assert cut is reply
        return
    assert cut.finish() == "length" and completion_tokens(cut)[0] <= limit
    for before, after in ((reply.reasoning, cut.reasoning), (reply.content, cut.content)):
        assert after is None or (before or "").startswith(after)
    assert len(cut.calls) <= len(reply.calls)
    for whole, kept in zip(reply.calls, cut.calls):
        assert whole.arguments.startswith(kept.arguments) and kept.name == whole.name


async def test_chat_stops_at_max_completion_tokens_and_says_length(fake: FakeUpstream) -> None:
    fake.script(Reply.text(LONG), Reply.text(LONG), Reply.text(LONG))
    async with client(fake) as api:
        cut = await api.chat.completions.create(model="gpt-4o", messages=[user("go")],
                                                max_completion_tokens=12)
        legacy = await api.chat.completions.create(model="gpt-4o", messages=[user("go")],
                                                   max_tokens=12)
        whole = await api.chat.completions.create(model="gpt-4o", messages=[user("go")],
                                                  max_tokens=4096)
    for answer in (cut, legacy):
        assert answer.choices[0].finish_reason == "length"
        assert answer.choices[0].message.content == token_prefix(LONG, 12)[0]
        assert answer.usage is not None and answer.usage.completion_tokens == 12
    assert whole.choices[0].finish_reason == "stop" and whole.choices[0].message.content == LONG


async def test_a_call_cut_short_keeps_the_start_of_its_arguments_streamed_or_not(
        fake: FakeUpstream) -> None:
    limit = completion_tokens(TOOLS)[0] - 20
    fake.script(TOOLS, TOOLS)
    async with client(fake) as api:
        whole = await api.chat.completions.create(model="gpt-4o", messages=[user("go")],
                                                  max_tokens=limit)
        stream = await api.chat.completions.create(model="gpt-4o", messages=[user("go")],
                                                   max_tokens=limit, stream=True,
                                                   stream_options={"include_usage": True})
        chunks = [c async for c in stream]
    choice = whole.choices[0]
    assert choice.finish_reason == "length" and choice.message.content == "Writing it down."
    arguments = (choice.message.tool_calls or [])[0].function.arguments
    assert TOOLS.calls[0].arguments.startswith(arguments) and arguments != TOOLS.calls[0].arguments
    streamed = "".join(f.function.arguments or "" for c in chunks if c.choices
                       for f in c.choices[0].delta.tool_calls or ())
    assert streamed == arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens <= limit


async def test_each_of_n_choices_has_the_cap_to_itself(fake: FakeUpstream) -> None:
    fake.script(Reply.text(LONG))
    async with client(fake) as api:
        answer = await api.chat.completions.create(model="gpt-4o", messages=[user("go")], n=2,
                                                   max_completion_tokens=10)
    assert [c.finish_reason for c in answer.choices] == ["length", "length"]
    assert answer.usage is not None and answer.usage.completion_tokens == 20


async def test_reasoning_that_uses_the_whole_cap_leaves_no_text() -> None:
    async with FakeUpstream(dialect="deepseek-thinking") as fake:
        fake.script(Reply.text("The answer.", reasoning="Let me think this through. " * 10))
        async with client(fake) as api:
            answer = await api.chat.completions.create(model="deepseek-reasoner",
                                                       messages=[user("go")], max_tokens=8)
    message: Any = answer.choices[0].message
    assert answer.choices[0].finish_reason == "length" and message.content is None
    assert message.model_extra["reasoning_content"] == token_prefix(
        "Let me think this through. " * 10, 8)[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_stop_at_max_output_tokens_as_incomplete(fake: FakeUpstream,
                                                                 stream: bool) -> None:
    fake.script(Reply.text(LONG))
    async with client(fake) as api:
        if stream:
            events = [e async for e in await api.responses.create(
                model="gpt-5", input="go", max_output_tokens=16, stream=True)]
            assert events[-1].type == "response.incomplete"
            response: Any = events[-1].response
        else:
            response = await api.responses.create(model="gpt-5", input="go",
                                                  max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[-1].status == "incomplete"
    assert response.output_text == token_prefix(LONG, 16)[0]
    assert response.usage.output_tokens == 16


async def test_a_reasoning_model_out_of_tokens_in_its_reasoning_writes_no_message() -> None:
    async with FakeUpstream(always_reason=True) as fake, client(fake) as api:
        fake.script(Reply.text("Done.", reasoning="Thinking hard about it. " * 20))
        response = await api.responses.create(model="gpt-5", input="go", max_output_tokens=16)
    assert [item.type for item in response.output] == ["reasoning"]
    assert response.status == "incomplete" and response.output_text == ""


def test_through_the_proxy_a_cut_answer_is_relayed_and_anchors_the_next_turn(
        make_fake, make_proxy, make_client) -> None:
    fake = make_fake()
    fake.script(Reply.text(LONG), Reply.text("Go on."))
    proxy = make_proxy(fake, tokens=COUNTED)
    api = make_client(proxy.base_url)
    thread = {"x-thread-id": "cut-short"}
    answer = api.chat.completions.create(model="gpt-4o", messages=[user("go")],
                                         max_completion_tokens=12, extra_headers=thread)
    assert answer.choices[0].finish_reason == "length"
    kept = answer.choices[0].message.model_dump(exclude_none=True)
    follow = [user("go"), kept, user("continue")]
    api.chat.completions.create(model="gpt-4o", messages=follow, extra_headers=thread)
    assert fake.last("/chat/completions").json["messages"] == follow
    assert proxy.requests()[-1]["anchor_used"] is True


@pytest.mark.parametrize("stream", [False, True])
def test_through_the_proxy_an_incomplete_response_anchors_the_next_turn(
        make_fake, make_proxy, make_client, stream: bool) -> None:
    fake = make_fake()
    fake.script(Reply.text(LONG), Reply.text("Go on."))
    proxy = make_proxy(fake, tokens=COUNTED)
    api = make_client(proxy.base_url)
    thread = {"x-thread-id": f"incomplete-{stream}"}
    asked = [{"role": "user", "content": "go"}]
    if stream:
        events = list(api.responses.create(model="gpt-4o", input=asked, max_output_tokens=16,
                                           stream=True, extra_headers=thread))
        assert events[-1].type == "response.incomplete"
        response: Any = events[-1].response
    else:
        response = api.responses.create(model="gpt-4o", input=asked, max_output_tokens=16,
                                        extra_headers=thread)
    assert response.status == "incomplete" and response.usage.output_tokens == 16
    kept = [item.model_dump(exclude_none=True) for item in response.output]
    follow = [*asked, *kept, {"role": "user", "content": "continue"}]
    api.responses.create(model="gpt-4o", input=follow, extra_headers=thread)
    assert fake.last("/responses").json["input"] == follow
    line = proxy.requests()[-1]
    assert line["status"] == 200 and line["anchor_used"] is True
