from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.compaction.manual import (MARKER, chat_completion, chat_stream, choice_count,
                                     compacted_text, detect, include_usage, nothing_text,
                                     response_object, response_stream, strip_exchanges,
                                     synthetic_ids)
from proxy.conversation import Api
from tests.test_compaction_support import (assistant, conv, ids_of, r_assistant, r_user, system,
                                           user)

IDS = synthetic_ids("thread-1:1700000000")
TEXT = compacted_text(summarized=42, kept=6, tokens_before=120_000, tokens_after=18_000)
EVENTS = TypeAdapter(ResponseStreamEvent)


def sse(body: bytes) -> list[tuple[str | None, bytes]]:
    frames = []
    for frame in body.split(b"\n\n"):
        if not frame:
            continue
        event, data = None, b""
        for line in frame.split(b"\n"):
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        frames.append((event, data))
    return frames


def test_detects_the_command_with_and_without_focus() -> None:
    entries = conv(Api.CHAT, [system(), user("hi"), assistant("yo"), user("  /compact  ")])
    assert detect(entries, "/compact").focus is None
    focused = conv(Api.CHAT, [user("/compact keep the\nAPI names")])
    assert detect(focused, "/compact").focus == "keep the\nAPI names"
    assert detect(conv(Api.CHAT, [user("/compaction please")]), "/compact") is None
    assert detect(conv(Api.CHAT, [user("/compact"), assistant("x")]), "/compact") is None
    assert detect(conv(Api.RESPONSES, [r_user("/compact")]), "/compact") is not None


def test_answer_text_says_what_happened() -> None:
    assert TEXT.startswith(MARKER)
    assert "42" in TEXT and "120,000" in TEXT and "18,000" in TEXT
    assert "Nothing new to compact" in nothing_text(5000)


def test_command_and_our_answer_are_stripped_from_later_context() -> None:
    elements = [system(), user("a"), assistant("b"), user("/compact"), assistant(TEXT),
                user("/compact focus"), assistant(nothing_text(10)), user("c"), user("/compact")]
    entries = conv(Api.CHAT, elements)
    ids = ids_of(entries)
    kept, kept_ids = strip_exchanges(entries, ids, "/compact")
    assert [e.raw for e in kept] == [system(), user("a"), assistant("b"), user("c")]
    assert kept_ids == [ids[0], ids[1], ids[2], ids[7]]


def test_an_ordinary_answer_after_a_command_is_kept() -> None:
    entries = conv(Api.CHAT, [user("/compact"), assistant("a model's answer"), user("x")])
    kept, _ = strip_exchanges(entries, ids_of(entries), "/compact")
    assert [e.raw for e in kept] == [assistant("a model's answer"), user("x")]


def test_responses_echo_of_our_answer_is_stripped() -> None:
    entries = conv(Api.RESPONSES, [r_user("a"), r_user("/compact"),
                                   r_assistant(TEXT, IDS.message), r_user("b")])
    kept, _ = strip_exchanges(entries, ids_of(entries), "/compact")
    assert [e.raw for e in kept] == [r_user("a"), r_user("b")]


def test_chat_completion_parses_with_the_openai_types() -> None:
    body = chat_completion(TEXT, model="gpt-x", created=1700000000, completion_id=IDS.completion)
    parsed = ChatCompletion.model_validate(orjson.loads(orjson.dumps(body)))
    assert parsed.choices[0].message.content == TEXT
    assert parsed.choices[0].finish_reason == "stop"


def test_chat_stream_without_usage() -> None:
    frames = sse(chat_stream(TEXT, model="m", created=1, completion_id=IDS.completion,
                             include_usage=False))
    assert frames[-1] == (None, b"[DONE]")
    chunks = [ChatCompletionChunk.model_validate(orjson.loads(d)) for _, d in frames[:-1]]
    assert [c.choices[0].delta.role for c in chunks] == ["assistant", None, None]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == TEXT
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, "stop"]
    assert all(b'"usage"' not in d for _, d in frames)


def test_chat_stream_with_usage_chunk_last() -> None:
    assert include_usage({"stream_options": {"include_usage": True}})
    assert not include_usage({"stream": True})
    frames = sse(chat_stream(TEXT, model="m", created=1, completion_id=IDS.completion,
                             include_usage=True))
    chunks = [ChatCompletionChunk.model_validate(orjson.loads(d)) for _, d in frames[:-1]]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert all(orjson.loads(d)["usage"] is None for _, d in frames[:-2])


def test_chat_answer_has_as_many_choices_as_n_asks() -> None:
    body = chat_completion(TEXT, model="m", created=1, completion_id=IDS.completion, choices=3)
    parsed = ChatCompletion.model_validate(body)
    assert [c.index for c in parsed.choices] == [0, 1, 2]
    assert all(c.message.content == TEXT and c.finish_reason == "stop" for c in parsed.choices)


def test_chat_stream_interleaves_the_choices_and_adds_up_to_each() -> None:
    frames = sse(chat_stream(TEXT, model="m", created=1, completion_id=IDS.completion,
                             include_usage=True, choices=2))
    chunks = [ChatCompletionChunk.model_validate(orjson.loads(d)) for _, d in frames[:-1]]
    assert [c.choices[0].index for c in chunks[:-1]] == [0, 1, 0, 1, 0, 1]
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks[:-1] if c.choices[0].index == index]
        assert [c.delta.role for c in mine] == ["assistant", None, None]
        assert "".join(c.delta.content or "" for c in mine) == TEXT
        assert [c.finish_reason for c in mine] == [None, None, "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


def test_choice_count_reads_n_within_openais_range_only() -> None:
    assert [choice_count({"n": n}) for n in (1, 2, 128)] == [1, 2, 128]
    for odd in (0, -1, 129, True, 2.0, "2", None):
        assert choice_count({"n": odd}) == 1, odd
    assert choice_count({}) == 1


def test_responses_json_parses_with_the_openai_types() -> None:
    body = response_object(TEXT, model="gpt-x", created=1700000000, ids=IDS,
                           doc={"instructions": "be brief", "metadata": {"k": "v"}})
    parsed = Response.model_validate(orjson.loads(orjson.dumps(body)))
    assert parsed.output_text == TEXT and parsed.status == "completed"
    assert parsed.instructions == "be brief" and parsed.id == IDS.response


def test_responses_stream_events_parse_in_order() -> None:
    frames = sse(response_stream(TEXT, model="m", created=1, ids=IDS))
    events = [EVENTS.validate_python(orjson.loads(data)) for _, data in frames]
    assert [name for name, _ in frames] == [e.type for e in events]
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(9))
    assert events[0].response.status == "in_progress"
    assert events[-1].response.output_text == TEXT
    assert b"[DONE]" not in b"".join(d for _, d in frames)


@given(st.text(alphabet=" \n\t/compactx", max_size=14), st.sampled_from(["/compact", "/c", " /c "]))
def test_the_mentions_shortcut_never_changes_what_detect_finds(text: str, command: str) -> None:
    from proxy.compaction.manual import parse_command

    entries = conv(Api.CHAT, [user(text)])
    assert detect(entries, command) == parse_command(text, command)
    assert detect(entries, command) == parse_command(text, command)  # from the entry's memo


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]),
                          st.text(alphabet=" /compactx", max_size=10), st.booleans()), max_size=8),
       st.sampled_from(["/compact", "/c"]))
def test_mentioned_is_whether_some_user_message_mentions_the_command(
        messages: list[tuple[str, str, bool]], command: str) -> None:
    from proxy.compaction.manual import mentioned, mentions
    from proxy.conversation import Kind

    entries = conv(Api.CHAT, [user(t) if role == "user" else assistant(t) for role, t, _ in messages])
    for entry, (_, _, asked) in zip(entries, messages, strict=True):
        if asked and entry.kind is Kind.USER:
            mentions(entry, command)  # some answers already kept on their entries
    expected = any(e.kind is Kind.USER and e.raw["content"].lstrip().startswith(command)
                   for e in entries)
    assert mentioned(entries, command) is expected
    assert mentioned(entries, command) is expected  # every answer kept now
