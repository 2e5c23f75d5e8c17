"""The SSE decoder: exact bytes per event, any chunking, any line ending."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.sse import SseDecoder, SseEvent

CHAT = (b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
        b"data: [DONE]\n\n")
RESPONSES = (b"event: response.created\n"
             b'data: {"type":"response.created"}\n\n'
             b": keep-alive\n\n"
             b"event: response.completed\n"
             b'data: {"type":"response.completed","response":{"usage":{"input_tokens":3}}}\n\n')


def decode(chunks: list[bytes], max_event_bytes: int | None = None) -> list[SseEvent]:
    decoder = SseDecoder() if max_event_bytes is None else SseDecoder(max_event_bytes)
    events = [e for chunk in chunks for e in decoder.feed(chunk)]
    return events + decoder.flush()


def test_chat_stream_events_keep_their_bytes() -> None:
    events = decode([CHAT])
    assert [e.raw for e in events] == [part + b"\n\n" for part in CHAT.split(b"\n\n")[:-1]]
    assert events[0].json() == {"choices": [{"delta": {"content": "Hel"}}]}
    assert events[-1].done and not events[0].done


def test_event_names_and_comment_blocks() -> None:
    events = decode([RESPONSES])
    assert [e.event for e in events] == ["response.created", None, "response.completed"]
    assert events[1].data is None and events[1].raw == b": keep-alive\n\n"
    assert b"".join(e.raw for e in events) == RESPONSES


def test_multiline_data_is_joined_with_newlines() -> None:
    [event] = decode([b"data: first\ndata:second\ndata\n\n"])
    assert event.data == "first\nsecond\n"


def test_crlf_and_cr_line_endings() -> None:
    crlf = decode([b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n"])
    cr = decode([b"event: a\rdata: 1\r\rdata: 2\r\r"])
    assert [(e.event, e.data) for e in crlf] == [(e.event, e.data) for e in cr] == [("a", "1"), (None, "2")]
    assert crlf[0].raw == b"event: a\r\ndata: 1\r\n\r\n"


def test_crlf_split_between_chunks_stays_in_one_line_end() -> None:
    events = decode([b"data: 1\r", b"\ndata: 2\r\n\r\n"])
    assert [e.raw for e in events] == [b"data: 1\r\ndata: 2\r\n\r\n"]
    assert events[0].data == "1\n2"


def test_a_cr_that_ends_a_blank_line_dispatches_at_once() -> None:
    """It ends the event whatever follows; an LF after it in the next read (a CRLF split) is
    an event of its own with no data, its bytes passed on as they came."""
    decoder = SseDecoder()
    [first] = decoder.feed(b"data: 1\r\n\r")
    assert (first.raw, first.data, decoder.held) == (b"data: 1\r\n\r", "1", 0)
    assert [(e.raw, e.data) for e in decoder.feed(b"\ndata: 2\r\n\r\n")] == [
        (b"\n", None), (b"data: 2\r\n\r\n", "2")]
    [cr] = SseDecoder().feed(b"data: 3\r\r")
    assert cr.data == "3"


def test_event_split_byte_by_byte() -> None:
    events = decode([bytes([b]) for b in RESPONSES])
    assert b"".join(e.raw for e in events) == RESPONSES
    assert [e.event for e in events] == ["response.created", None, "response.completed"]


def test_flush_returns_an_unterminated_last_event() -> None:
    events = decode([b"data: 1\n\ndata: [DONE]"])
    assert [e.data for e in events] == ["1", "[DONE]"]
    assert events[-1].raw == b"data: [DONE]"


def test_utf8_split_inside_a_character() -> None:
    text = "数据".encode()
    events = decode([b"data: " + text[:2], text[2:] + b"\n\n"])
    assert events[0].data == "数据"


def test_bom_at_stream_start_is_ignored_but_kept() -> None:
    [event] = decode([b"\xef\xbb\xbfdata: x\n\n"])
    assert event.data == "x" and event.raw.startswith(b"\xef\xbb\xbf")


def test_id_field_and_single_leading_space() -> None:
    [event] = decode([b"id: 7\ndata:  two spaces\n\n"])
    assert (event.id, event.data) == ("7", " two spaces")


def test_oversized_event_passes_through_in_pieces() -> None:
    big = b"data: " + b"x" * 500 + b"\n\n"
    events = decode([big[:200], big[200:400], big[400:], b"data: small\n\n"], max_event_bytes=100)
    assert b"".join(e.raw for e in events) == big + b"data: small\n\n"
    assert all(not e.complete for e in events[:-1])
    assert events[-1].complete and events[-1].data == "small"


def test_non_json_data_parses_to_none() -> None:
    [event] = decode([b"data: {oops\n\n"])
    assert event.json() is None


@given(st.lists(st.sampled_from([CHAT, RESPONSES, b"data: a\r\n\r\n", b": c\r\r", b"data: b\n\n"]),
                max_size=6),
       st.lists(st.integers(1, 40), max_size=30))
def test_any_chunking_gives_the_same_events(parts: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(parts)
    chunks, i = [], 0
    for cut in cuts:
        chunks.append(stream[i:i + cut])
        i += cut
    chunks.append(stream[i:])
    whole, pieces = decode([stream]), decode(chunks)
    # A read that ends in a blank line's CR ends its event there; the LF after it comes alone.
    assert ([(e.data, e.event) for e in pieces if e.raw != b"\n"]
            == [(e.data, e.event) for e in whole if e.raw != b"\n"])
    assert b"".join(e.raw for e in pieces) == stream


@given(st.binary(max_size=400), st.integers(16, 64))
def test_hostile_bytes_never_raise_and_lose_nothing(data: bytes, limit: int) -> None:
    decoder = SseDecoder(limit)
    out = [e for i in range(0, len(data), 7) for e in decoder.feed(data[i:i + 7])]
    out += decoder.flush()
    assert b"".join(e.raw for e in out) == data
