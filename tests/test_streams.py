"""Rebuilding responses from chat deltas and Responses events; whole-body helpers."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.sse import SseDecoder, SseEvent
from proxy.streams import (ChatStream, ChunkKind, ResponsesStream, chat_message, joined, merge_delta,
                           responses_output, usage_of)


def data(obj: Any) -> SseEvent:
    raw = b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"
    [event] = SseDecoder().feed(raw)
    return event


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> SseEvent:
    return data({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


def call_delta(index: int, **fields: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **fields}]}


def feed_all(stream: ChatStream | ResponsesStream, events: list[SseEvent]) -> list[ChunkKind]:
    return [stream.feed(e) for e in events]


def test_text_deltas_are_concatenated() -> None:
    stream = ChatStream()
    kinds = feed_all(stream, [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
                              chunk({"content": "lo"}), chunk({}, "stop"), data(b"[DONE]")])
    assert kinds[-1] is ChunkKind.DONE and stream.done
    assert stream.message() == {"role": "assistant", "content": "Hello"}
    assert stream.finish_reason == "stop" and (stream.id, stream.model) == ("chatcmpl-1", "m")


def test_interleaved_tool_call_fragments_split_mid_json() -> None:
    stream = ChatStream()
    feed_all(stream, [
        chunk({"role": "assistant", "content": None, **call_delta(
            0, id="call_A", type="function", function={"name": "get_weather", "arguments": ""})}),
        chunk(call_delta(0, function={"arguments": "{\"ci"})),
        chunk(call_delta(1, id="call_B", type="function", function={"name": "get_time", "arguments": ""})),
        chunk(call_delta(0, function={"arguments": "ty\": \"Par"})),
        chunk(call_delta(1, function={"arguments": "{}"})),
        chunk(call_delta(0, function={"arguments": "is\"}"})),
        chunk({}, "tool_calls")])
    message = stream.message()
    assert message is not None
    assert message["tool_calls"] == [
        {"id": "call_A", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_B", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]
    assert stream.finish_reason == "tool_calls"


def test_identifiers_repeated_in_every_chunk_are_not_doubled() -> None:
    stream = ChatStream()
    for piece in ("{\"a\"", ":1}"):
        stream.feed(chunk({"role": "assistant", **call_delta(
            0, id="call_1", type="function", function={"name": "f", "arguments": piece})}))
    message = stream.message()
    assert message is not None and message["role"] == "assistant"
    assert message["tool_calls"] == [{"id": "call_1", "type": "function",
                                      "function": {"name": "f", "arguments": "{\"a\":1}"}}]


def test_tool_call_without_arguments_gets_an_empty_string() -> None:
    stream = ChatStream()
    stream.feed(chunk(call_delta(0, id="c", type="function", function={"name": "noop"})))
    message = stream.message()
    assert message is not None and message["tool_calls"][0]["function"]["arguments"] == ""


def test_reasoning_fields_and_extra_content() -> None:
    stream = ChatStream()
    feed_all(stream, [
        chunk({"reasoning_content": "Think", "reasoning": "Think"}),
        chunk({"reasoning_content": "ing.", "reasoning": "ing.",
               "reasoning_details": [{"type": "reasoning.text", "text": "Think", "index": 0,
                                      "format": "anthropic-claude-v1"}]}),
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "ing.", "index": 0}]}),
        chunk({"reasoning_details": [{"type": "reasoning.text", "signature": "sig==", "index": 0}]}),
        chunk({"content": "Done", **call_delta(0, id="c", type="function",
                                                function={"name": "f", "arguments": "{}"},
                                                extra_content={"google": {"thought_signature": "abc"}})}),
        chunk(call_delta(0, extra_content={"google": {"thought_signature": "abc"}}))])
    message = stream.message()
    assert message is not None
    assert (message["reasoning_content"], message["reasoning"]) == ("Thinking.", "Thinking.")
    assert message["reasoning_details"] == [{"type": "reasoning.text", "text": "Thinking.", "index": 0,
                                             "format": "anthropic-claude-v1", "signature": "sig=="}]
    assert message["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "abc"}}


def test_refusal_deltas() -> None:
    stream = ChatStream()
    feed_all(stream, [chunk({"refusal": "I can't"}), chunk({"refusal": " help."})])
    message = stream.message()
    assert message is not None and message["refusal"] == "I can't help."


def test_usage_only_chunk_is_recognised() -> None:
    stream = ChatStream()
    kinds = feed_all(stream, [
        chunk({"content": "x"}, usage=None), chunk({}, "stop", usage=None),
        data({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})])
    assert kinds == [ChunkKind.DATA, ChunkKind.DATA, ChunkKind.USAGE_ONLY]
    assert stream.usage == {"prompt_tokens": 5, "completion_tokens": 1}


def test_usage_on_a_chunk_with_choices_is_not_usage_only() -> None:
    stream = ChatStream()
    kind = stream.feed(chunk({}, "stop", usage={"prompt_tokens": 5, "completion_tokens": 1}))
    assert kind is ChunkKind.DATA and stream.usage is not None


def test_mid_stream_error_frame() -> None:
    stream = ChatStream()
    kinds = feed_all(stream, [chunk({"content": "partial"}),
                              data({"error": {"message": "overloaded", "type": "server_error"}})])
    assert kinds[-1] is ChunkKind.ERROR
    assert stream.error == {"message": "overloaded", "type": "server_error"}


def test_comments_and_garbage_are_other() -> None:
    stream = ChatStream()
    [comment] = SseDecoder().feed(b": ping\n\n")
    assert stream.feed(comment) is ChunkKind.OTHER
    assert stream.feed(data(b"not json")) is ChunkKind.OTHER
    assert stream.message() is None


def test_several_choices_are_kept_apart() -> None:
    stream = ChatStream()
    stream.feed(data({"choices": [{"index": 0, "delta": {"content": "a"}},
                                  {"index": 1, "delta": {"content": "b"}}]}))
    stream.feed(data({"choices": [{"index": 1, "delta": {"content": "c"}}]}))
    assert [stream.message(i)["content"] for i in (0, 1)] == ["a", "bc"]  # type: ignore[index]


@given(st.lists(st.text(max_size=6), min_size=1, max_size=8), st.lists(st.text(max_size=6), max_size=8),
       st.lists(st.booleans(), max_size=16))
def test_any_interleaving_of_two_calls_rebuilds_both(first: list[str], second: list[str],
                                                     order: list[bool]) -> None:
    stream = ChatStream()
    stream.feed(chunk(call_delta(0, id="a", type="function", function={"name": "f", "arguments": ""})))
    stream.feed(chunk(call_delta(1, id="b", type="function", function={"name": "g", "arguments": ""})))
    queues = [list(first), list(second)]
    for pick_second in [*order, *[False] * len(first), *[True] * len(second)]:
        index = int(pick_second)
        if queues[index]:
            stream.feed(chunk(call_delta(index, function={"arguments": queues[index].pop(0)})))
    message = stream.message()
    assert message is not None
    calls = message["tool_calls"]
    assert [c["id"] for c in calls] == ["a", "b"]
    assert [c["function"]["arguments"] for c in calls] == ["".join(first), "".join(second)]


def test_merge_delta_never_mutates_the_delta() -> None:
    delta = {"tool_calls": [{"index": 0, "function": {"arguments": "x"}}]}
    acc: dict[str, Any] = {}
    merge_delta(acc, delta)
    merge_delta(acc, delta)
    assert delta == {"tool_calls": [{"index": 0, "function": {"arguments": "x"}}]}
    assert joined(acc)["tool_calls"][0]["function"]["arguments"] == "xx"


# ---------------------------------------------------------------- Responses

def event(kind: str, **fields: Any) -> SseEvent:
    raw = f"event: {kind}\n".encode() + b"data: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    [decoded] = SseDecoder().feed(raw)
    return decoded


MESSAGE_ITEM = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Hi", "annotations": []}]}
CALL_ITEM = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"}
USAGE = {"input_tokens": 37, "output_tokens": 11, "output_tokens_details": {"reasoning_tokens": 0},
         "total_tokens": 48}


def test_responses_stream_collects_items_in_output_order() -> None:
    stream = ResponsesStream()
    kinds = feed_all(stream, [
        event("response.created", response={"id": "resp_1", "status": "in_progress", "usage": None}),
        event("response.output_item.added", output_index=0, item={**MESSAGE_ITEM, "content": []}),
        event("response.output_text.delta", item_id="msg_1", output_index=0, delta="Hi"),
        event("response.output_item.done", output_index=1, item=CALL_ITEM),
        event("response.output_item.done", output_index=0, item=MESSAGE_ITEM),
        event("response.completed", response={"id": "resp_1", "status": "completed", "usage": USAGE,
                                              "output": [MESSAGE_ITEM, CALL_ITEM]})])
    assert kinds[-1] is ChunkKind.DONE
    assert stream.output() == [MESSAGE_ITEM, CALL_ITEM]
    assert (stream.id, stream.status, stream.usage) == ("resp_1", "completed", USAGE)


def test_responses_output_from_the_final_response_when_no_item_events() -> None:
    stream = ResponsesStream()
    stream.feed(event("response.incomplete", response={"status": "incomplete", "output": [MESSAGE_ITEM],
                                                       "usage": USAGE}))
    assert stream.output() == [MESSAGE_ITEM] and stream.status == "incomplete"


def test_responses_error_event_nested_and_flat() -> None:
    nested, flat = ResponsesStream(), ResponsesStream()
    error = {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "too long"}
    assert nested.feed(event("error", sequence_number=2, error=error)) is ChunkKind.ERROR
    assert flat.feed(event("error", code="server_error", message="boom")) is ChunkKind.ERROR
    assert nested.error == error
    assert flat.error is not None and flat.error["code"] == "server_error"


def test_responses_failed_is_an_error_with_usage() -> None:
    stream = ResponsesStream()
    kind = stream.feed(event("response.failed", response={
        "status": "failed", "error": {"code": "server_error", "message": "x"}, "usage": USAGE}))
    assert kind is ChunkKind.ERROR and stream.usage == USAGE and stream.status == "failed"


# ---------------------------------------------------------------- whole bodies

def test_non_stream_helpers() -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"},
                         "finish_reason": "stop"}], "usage": {"prompt_tokens": 1}}
    assert chat_message(body) == {"role": "assistant", "content": "x"}
    assert chat_message(body, 1) is None and chat_message({"choices": "bad"}) is None
    assert usage_of(body) == {"prompt_tokens": 1} and usage_of([]) is None
    assert responses_output({"output": [MESSAGE_ITEM, "junk"]}) == [MESSAGE_ITEM]
    assert responses_output({"output": None}) == []
