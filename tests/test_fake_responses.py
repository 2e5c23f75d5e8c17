"""The fake's Responses API: shapes, events, storage, overflow, and Codex-style encrypted reasoning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from openai import AsyncOpenAI

from proxy.testing.fake_upstream import DEFAULT_TEXT, FakeUpstream
from proxy.testing.messages import item_output, item_user
from proxy.testing.replies import Reply, call

CODEX = {"store": False, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "thread-1"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(limits={"small-*": 300}) as upstream:
        yield upstream


async def post(fake: FakeUpstream, payload: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/responses", json=payload) as response:
            raw = await response.read()
            if response.content_type == "text/event-stream":
                return response.status, parse_events(raw)
            return response.status, orjson.loads(raw)


def parse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in raw.decode().split("\n\n"):
        if frame.strip():
            kind_line, data_line = frame.split("\n")
            assert kind_line.startswith("event: ") and data_line.startswith("data: ")
            events.append((kind_line[7:], orjson.loads(data_line[6:])))
    return events


async def test_non_streamed_response_shape(fake: FakeUpstream) -> None:
    status, body = await post(fake, {"model": "gpt-5", "input": "hi", "instructions": "be brief"})
    assert status == 200 and body["object"] == "response" and body["status"] == "completed"
    assert body["id"].startswith("resp_") and body["instructions"] == "be brief"
    [message] = body["output"]
    assert message["id"].startswith("msg_") and message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "annotations": [], "logprobs": [],
                                   "text": DEFAULT_TEXT}]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}


async def test_stream_events_follow_the_spec_order(fake: FakeUpstream) -> None:
    fake.script(Reply.tool_calls(call("shell", {"cmd": "ls -la"}), content="Looking."))
    status, events = await post(fake, {"model": "gpt-5", "input": "hi", "stream": True})
    kinds = [k for k, _ in events]
    assert status == 200
    assert kinds[:5] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.delta"]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert all(d["type"] == k for k, d in events)
    assert events[0][1]["response"]["usage"] is None
    arguments = "".join(d["delta"] for k, d in events if k == "response.function_call_arguments.delta")
    assert orjson.loads(arguments) == {"cmd": "ls -la"}
    final = events[-1][1]["response"]
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["id"].startswith("fc_") and final["output"][1]["call_id"].startswith("call_")


async def test_store_keeps_responses_for_previous_response_id(fake: FakeUpstream) -> None:
    fake.script(Reply.tool_calls(call("read_file", {"path": "a"})))
    _, first = await post(fake, {"model": "gpt-5", "input": "hi"})
    call_id = first["output"][0]["call_id"]
    status, second = await post(fake, {"model": "gpt-5", "previous_response_id": first["id"],
                                       "input": [item_output(call_id, "contents")]})
    assert status == 200 and second["previous_response_id"] == first["id"]
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{fake.url}/responses/{first['id']}") as response:
            assert (await response.json())["id"] == first["id"]


async def created_conversation(fake: FakeUpstream) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/conversations", json={}) as response:
            return (await response.json())["id"]


async def test_a_conversation_keeps_its_items_upstream(fake: FakeUpstream) -> None:
    conv_1, conv_2 = await created_conversation(fake), await created_conversation(fake)
    fake.script(Reply.tool_calls(call("read_file", {"path": "a"})))
    _, first = await post(fake, {"model": "gpt-5", "input": "hi", "conversation": conv_1})
    assert first["conversation"] == {"id": conv_1}
    call_id = first["output"][0]["call_id"]
    answer = [item_output(call_id, "contents")]
    status, second = await post(fake, {"model": "gpt-5", "input": answer,
                                       "conversation": {"id": conv_1}})
    assert status == 200 and second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    status, body = await post(fake, {"model": "gpt-5", "input": answer, "conversation": conv_2})
    assert status == 400 and body["error"]["message"] == (
        f"No tool call found for function call output with call_id {call_id}.")


async def test_a_conversation_left_with_an_unanswered_call_is_rejected(fake: FakeUpstream) -> None:
    conversation = await created_conversation(fake)
    fake.script(Reply.tool_calls(call("read_file", {"path": "a"})))
    _, first = await post(fake, {"model": "gpt-5", "input": "hi", "conversation": conversation})
    status, body = await post(fake, {"model": "gpt-5", "input": "next", "conversation": conversation})
    assert status == 400 and body["error"]["message"] == (
        f"No tool output found for function call {first['output'][0]['call_id']}.")


async def test_unknown_or_unstored_previous_response(fake: FakeUpstream) -> None:
    _, unstored = await post(fake, {"model": "gpt-5", "input": "hi", "store": False})
    for missing in ("resp_nope", unstored["id"]):
        status, body = await post(fake, {"model": "gpt-5", "input": "x", "previous_response_id": missing})
        assert status == 400 and body["error"] == {
            "message": f"Previous response with id '{missing}' not found.",
            "type": "invalid_request_error", "param": "previous_response_id",
            "code": "previous_response_not_found"}


async def test_overflow_as_400_and_as_stream_error_event(fake: FakeUpstream) -> None:
    big = {"model": "small-1", "input": "word " * 400}
    status, body = await post(fake, big)
    assert status == 400 and body["error"] == {
        "message": "Your input exceeds the context window of this model. Please adjust your input and "
                   "try again.", "type": "invalid_request_error", "param": "input",
        "code": "context_length_exceeded"}
    status, events = await post(fake, {**big, "stream": True})
    assert status == 200 and [k for k, _ in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1][1] == {"type": "error", "sequence_number": 2, "error": body["error"]}
    async with FakeUpstream(limits={"small-*": 300}, responses_stream_overflow="http") as strict:
        status, _ = await post(strict, {**big, "stream": True})
        assert status == 400


async def test_rules_reach_the_client_as_bad_requests(fake: FakeUpstream) -> None:
    async with AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as api:
        with pytest.raises(openai.BadRequestError, match="No tool call found"):
            await api.responses.create(model="gpt-5", input=[item_user("x"), item_output("call_9")])


# ---------------------------------------------------------------- Codex-style sessions

async def codex_turn(api: AsyncOpenAI, history: list[Any], stream: bool) -> list[Any]:
    """One Codex turn: send everything, get the output items back (from `output_item.done`)."""
    if not stream:
        response = await api.responses.create(model="gpt-5-codex", input=history, **CODEX)
        return [item.model_dump(exclude_none=True) for item in response.output]
    events = await api.responses.create(model="gpt-5-codex", input=history, stream=True, **CODEX)
    return [e.item.model_dump(exclude_none=True) async for e in events
            if e.type == "response.output_item.done"]


def echo(items: list[Any]) -> list[Any]:
    """What a client sends back: the items as received, without read-only status fields."""
    return [{k: v for k, v in i.items() if k != "status" or i["type"] != "reasoning"} for i in items]


@pytest.mark.parametrize("stream", [False, True])
async def test_codex_session_with_encrypted_reasoning_is_accepted(stream: bool) -> None:
    async with FakeUpstream(always_reason=True) as fake, \
            AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as api:
        fake.script(Reply.tool_calls(call("shell", {"cmd": "ls"})),
                    Reply.tool_calls(call("shell", {"cmd": "cat a"}), call("shell", {"cmd": "cat b"})),
                    Reply.text("All done."))
        history: list[Any] = [item_user("look around")]
        for _ in range(3):
            output = await codex_turn(api, history, stream)
            assert output[0]["type"] == "reasoning" and output[0]["encrypted_content"].startswith("gAAAAAB")
            history += echo(output)
            history += [item_output(i["call_id"], "ok") for i in output if i["type"] == "function_call"]
        assert output[-1]["content"][0]["text"] == "All done."
        history.append(item_user("thanks"))
        assert (await codex_turn(api, history, stream))[-1]["type"] == "message"


async def test_encrypted_reasoning_is_rejected_after_the_history_changed() -> None:
    async with FakeUpstream(always_reason=True) as fake, \
            AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as api:
        fake.script(Reply.tool_calls(call("shell", {"cmd": "ls"})))
        history: list[Any] = [item_user("first question"), item_user("look around")]
        output = await codex_turn(api, history, stream=False)
        results = [item_output(i["call_id"], "ok") for i in output if i["type"] == "function_call"]
        compacted = [item_user("Summary: the user asked things."), item_user("look around")]
        with pytest.raises(openai.BadRequestError) as rejected:
            await api.responses.create(model="gpt-5-codex", input=compacted + echo(output) + results, **CODEX)
        assert rejected.value.code == "invalid_encrypted_content"
        # Dropping the blob (and the ids it vouched for) is what makes the request valid again.
        stripped = [{k: v for k, v in i.items() if k != "id"} for i in output if i["type"] != "reasoning"]
        await api.responses.create(model="gpt-5-codex", input=compacted + stripped + results, **CODEX)


async def test_store_false_without_include_cannot_echo_reasoning() -> None:
    async with FakeUpstream(always_reason=True) as fake, \
            AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as api:
        first = await api.responses.create(model="gpt-5", input="hi", store=False)
        history = [item_user("hi"), *echo([i.model_dump(exclude_none=True) for i in first.output]),
                   item_user("more")]
        with pytest.raises(openai.NotFoundError, match="Items are not persisted"):
            await api.responses.create(model="gpt-5", input=history, store=False)


async def test_reasoning_summary_and_tokens() -> None:
    async with FakeUpstream() as fake:
        fake.script(Reply.text("42", reasoning="Add six and seven, times something."))
        status, events = await post(fake, {"model": "gpt-5", "input": "q", "stream": True,
                                           "reasoning": {"summary": "auto"}})
    summary = "".join(d["delta"] for k, d in events if k == "response.reasoning_summary_text.delta")
    assert summary == "Add six and seven, times something."
    usage = events[-1][1]["response"]["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] > 0
    assert usage["output_tokens"] > usage["output_tokens_details"]["reasoning_tokens"]


async def test_stream_failures_apply_to_responses_too(fake: FakeUpstream) -> None:
    fake.script(Reply.stream_error(after=3))
    status, events = await post(fake, {"model": "gpt-5", "input": "hi", "stream": True})
    assert status == 200 and len(events) == 4
    assert events[-1] == ("error", {"type": "error", "sequence_number": 3,
                                    "error": {"message": "The server had an error while processing "
                                              "your request. Sorry about that!", "type": "server_error",
                                              "param": None, "code": None}})
    fake.script(Reply.die(after=2))
    with pytest.raises(aiohttp.ClientPayloadError):
        await post(fake, {"model": "gpt-5", "input": "hi", "stream": True})
