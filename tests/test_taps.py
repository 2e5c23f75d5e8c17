"""The pipeline's stream taps: what reaches the client, what is read on the side."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.server.taps import _NULL_USAGE, ChatTap, ResponsesTap, _without_null_usage
from proxy.sse import SseEvent


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = b'data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
CHAT = (chat_chunk({"role": "assistant", "content": ""}) + chat_chunk({"content": "Hel"})
        + chat_chunk({"content": "lo"}) + chat_chunk({}, "stop") + USAGE + b"data: [DONE]\n\n")


def relay(tap: ChatTap | ResponsesTap, reads: list[bytes]) -> bytes:
    return b"".join(tap.feed(read) for read in reads) + tap.flush()


@pytest.mark.parametrize("size", [1, 7, 64, len(CHAT)])
def test_chat_tap_hides_the_usage_chunk_and_the_null_usage_keys(size: int) -> None:
    tap = ChatTap(hide_usage=True)
    out = relay(tap, [CHAT[i:i + size] for i in range(0, len(CHAT), size)])
    assert out == CHAT.replace(USAGE, b"").replace(b',"usage":null', b"")
    assert tap.hidden == 1 and tap.complete
    assert tap.response() == {"role": "assistant", "content": "Hello"}
    assert tap.usage() == {"prompt_tokens": 3, "completion_tokens": 2}


def test_chat_tap_relays_every_byte_when_the_client_asked_for_usage() -> None:
    tap = ChatTap(hide_usage=False)
    assert relay(tap, [CHAT]) == CHAT and tap.hidden == 0


def _old_without_null_usage(raw: bytes) -> bytes:
    for pattern in _NULL_USAGE:
        if pattern in raw:
            raw = raw.replace(pattern, b"")
    return raw


@given(st.lists(st.sampled_from([*_NULL_USAGE, b'"usage"', b'"usage":', b"null", b",", b" ", b"{",
                                 b"}", b'"x":1']), max_size=16).map(b"".join))
def test_null_usage_removal_stops_early_without_changing_the_result(raw: bytes) -> None:
    assert _without_null_usage(raw) == _old_without_null_usage(raw)


RESPONSES = [b"event: response.created\ndata: " + orjson.dumps(
                 {"type": "response.created", "sequence_number": 0, "response": {"id": "r"}}) + b"\n\n",
             b": keep-alive\n\n",
             b"event: response.output_text.delta\ndata: " + orjson.dumps(
                 {"type": "response.output_text.delta", "sequence_number": 1, "delta": "Hi"}) + b"\n\n"]


def test_responses_tap_parses_each_event_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = []
    original = SseEvent.json

    def counted(event: SseEvent) -> Any:
        parsed.append(event.raw)
        return original(event)

    monkeypatch.setattr(SseEvent, "json", counted)
    tap = ResponsesTap()
    assert relay(tap, RESPONSES) == b"".join(RESPONSES)
    assert parsed == RESPONSES


def test_responses_failure_frame_continues_the_sequence() -> None:
    tap = ResponsesTap()
    relay(tap, RESPONSES)
    frame = tap.failure_frame("gone")
    assert frame.startswith(b"event: error\ndata: ")
    assert orjson.loads(frame.split(b"data: ", 1)[1])["sequence_number"] == 2
