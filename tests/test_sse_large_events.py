"""A large event that comes in many reads (below the 16 MiB bound, so it is read) is held once
and copied once when it ends: its data is a view of its bytes. It used to be held four times
over: with LF line ends the held bytes, their copy joined to the last read, the block split
from that, the raw bytes and the data each copied from the block; with CR or CRLF each line
copied twice, its data once more, the event's bytes twice. A 15 MiB event cost 60 MiB."""

from __future__ import annotations

import tracemalloc

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy import sse
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.sse import SseDecoder
from tests.test_sse_reference import chunked, cuts, decoded, reference, seen, streams

MiB = 1024 * 1024
READ = 64 * 1024  # aiohttp's reads of a fast upstream


def _chat_chunk(content: bytes, usage: object = None, eol: bytes = b"\n") -> bytes:
    body = orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                         "choices": [{"index": 0, "delta": {"content": "X"}, "finish_reason": None}],
                         "usage": usage})
    return b"data: " + body.replace(b'"X"', b'"' + content + b'"') + eol + eol


def _completed(text: bytes, eol: bytes = b"\n") -> bytes:
    body = orjson.dumps({"type": "response.completed", "sequence_number": 3, "response": {
        "id": "r1", "status": "completed", "usage": {"input_tokens": 1, "output_tokens": 2},
        "output": [{"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "X"}]}]}})
    return (b"event: response.completed" + eol + b"data: " + body.replace(b'"X"', b'"' + text + b'"')
            + eol + eol)


def _reads(stream: bytes) -> list[bytes]:
    return [stream[i:i + READ] for i in range(0, len(stream), READ)]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("shape", ["chat", "responses"])
def test_a_15_mib_event_in_64_kib_reads_is_held_at_most_twice(shape: str, eol: bytes) -> None:
    text = b"a" * (15 * MiB)
    big = _chat_chunk(text, eol=eol) if shape == "chat" else _completed(text, eol)
    done = b"data: [DONE]" + eol + eol
    stream = big + done  # the next event comes in the big one's last read
    reads = _reads(stream)
    decoder, first = SseDecoder(), b"data: {}" + eol + eol
    primed = decoder.feed(first)  # with CR line ends it comes with the next read
    tracemalloc.start()
    try:
        events = [e for read in reads for e in decoder.feed(read)] + decoder.flush()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Held while it comes (its size, and the bytearray's growth room of an eighth), then
    # copied once into the event's bytes when its last read came: about twice, never more.
    assert peak <= 2.5 * len(big), peak / len(big)
    assert [e.raw for e in primed + events] == [first, big, done]
    events = events[len(events) - 2:]
    assert events[0].data_bytes == big[big.index(b"data: ") + 6:-2 * len(eol)]
    assert events[0].event == ("response.completed" if shape == "responses" else None)
    assert events[1].done


def test_a_large_event_reads_as_before_through_the_taps() -> None:
    content = "数据 \\n ".encode() * (200 * 1024)
    chat = ChatTap(hide_usage=True)
    stream = (_chat_chunk(b"") + _chat_chunk(content)
              + _chat_chunk(b"!", usage={"prompt_tokens": 1, "completion_tokens": 2})
              + b"data: [DONE]\n\n")
    out = b"".join(chat.feed(read) for read in _reads(stream)) + chat.flush()
    assert out == stream.replace(b',"usage":null', b"").replace(
        b',"usage":{"prompt_tokens":1,"completion_tokens":2}', b"")
    assert chat.response()["content"] == orjson.loads(b'"' + content + b'!"')
    assert chat.usage() == {"prompt_tokens": 1, "completion_tokens": 2} and chat.complete
    responses = ResponsesTap()
    stream = _completed(content)
    assert b"".join(responses.feed(read) for read in _reads(stream)) == stream
    assert responses.complete and responses.usage() == {"input_tokens": 1, "output_tokens": 2}


def test_a_large_last_chunk_with_usage_beside_its_choices_hides_the_usage() -> None:
    # Its data is a view: cutting the usage member out of it must still give bytes.
    tap = ChatTap(hide_usage=True)
    last = _chat_chunk(b"z" * (300 * 1024), usage={"prompt_tokens": 1, "completion_tokens": 2})
    out = b"".join(tap.feed(read) for read in _reads(_chat_chunk(b"") + last))
    assert out.endswith(b'"finish_reason":null}]}\n\n') and b'"usage"' not in out
    assert tap.usage() == {"prompt_tokens": 1, "completion_tokens": 2}


@given(streams, cuts, st.booleans(), st.integers(1, 48))
def test_every_held_event_read_as_a_view_decodes_as_before(stream: bytes, cut: list[int] | None,
                                                           flushed: bool, limit: int) -> None:
    """The view way taken for every held event, however small: the same events, bytes and data."""
    copied = decoded(SseDecoder(limit), chunked(stream, cut), flushed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sse, "_VIEW_FROM", 1)
        events = decoded(SseDecoder(), chunked(stream, cut), flushed)
        viewed = decoded(SseDecoder(limit), chunked(stream, cut), flushed)
    assert [seen(e) for e in events] == reference(stream, flushed, chunked(stream, cut))
    assert [(seen(e), e.data_bytes, e.done, e.json()) for e in viewed] == [
        (seen(e), e.data_bytes, e.done, e.json()) for e in copied]
