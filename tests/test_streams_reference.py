"""ChatStream against the concatenating version it replaced (kept here as the oracle), its
per-token short way included, and the cost that replacement removed: a string delta no longer
copies all the text so far."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.streams import ChatStream, ChunkKind, _next_text, joined, merge_delta
# Unchanged by the text pieces: the oracle shares them.
from proxy.streams import _by_index, _finished_call

# ---------------------------------------------------------------- oracle: the stream before

_MAPPING = (dict, Mapping)
_KEEP_FIRST = frozenset({"id", "type", "name", "role", "index"})
_TAKE_WHOLE = frozenset({"extra_content"})


def _old_merge_delta(acc: dict[str, Any], delta: Mapping[str, Any]) -> None:
    for key, value in delta.items():
        if value is None:
            continue
        old = acc.get(key)
        if old is None or key in _TAKE_WHOLE:
            acc[key] = _old_fresh(value)
        elif key in _KEEP_FIRST:
            continue
        elif isinstance(old, str) and isinstance(value, str):
            acc[key] = old + value
        elif isinstance(old, dict) and isinstance(value, _MAPPING):
            _old_merge_delta(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            _old_merge_list(old, value)
        else:
            acc[key] = _old_fresh(value)


def _old_merge_list(acc: list[Any], delta: list[Any]) -> None:
    for element in delta:
        index = element.get("index") if isinstance(element, _MAPPING) else None
        target = _old_with_index(acc, index) if isinstance(index, int) else None
        if target is None:
            acc.append(_old_fresh(element))
        else:
            _old_merge_delta(target, element)


def _old_with_index(acc: list[Any], index: int) -> dict[str, Any] | None:
    for element in acc:
        if isinstance(element, dict) and element.get("index") == index:
            return element
    return None


def _old_fresh(value: Any) -> Any:
    if isinstance(value, _MAPPING):
        out: dict[str, Any] = {}
        _old_merge_delta(out, value)
        return out
    return copy.deepcopy(value) if isinstance(value, list) else value


class _OldChatStream:
    def __init__(self) -> None:
        self._choices: dict[int, dict[str, Any]] = {}
        self.finish_reasons: dict[int, str] = {}
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.id: str | None = None
        self.model: str | None = None

    def feed_json(self, chunk: Any) -> ChunkKind:
        if not isinstance(chunk, _MAPPING):
            return ChunkKind.OTHER
        if chunk.get("error"):
            error = chunk["error"]
            self.error = dict(error) if isinstance(error, _MAPPING) else {"message": str(error)}
            return ChunkKind.ERROR
        self.id = self.id or (chunk.get("id") if isinstance(chunk.get("id"), str) else None)
        self.model = self.model or (chunk.get("model") if isinstance(chunk.get("model"), str) else None)
        if isinstance(chunk.get("usage"), _MAPPING):
            self.usage = dict(chunk["usage"])
        choices = chunk.get("choices")
        if choices == [] and isinstance(chunk.get("usage"), _MAPPING):
            return ChunkKind.USAGE_ONLY
        for choice in choices if isinstance(choices, list) else ():
            self._choice(choice)
        return ChunkKind.DATA

    def _choice(self, choice: Any) -> None:
        if not isinstance(choice, _MAPPING):
            return
        index = choice.get("index") if isinstance(choice.get("index"), int) else 0
        delta = choice.get("delta")
        if isinstance(delta, _MAPPING):
            _old_merge_delta(self._choices.setdefault(index, {}), delta)
        else:
            self._choices.setdefault(index, {})
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reasons[index] = choice["finish_reason"]

    def message(self, index: int = 0) -> dict[str, Any] | None:
        acc = self._choices.get(index)
        if acc is None:
            return None
        message: dict[str, Any] = {"role": acc.get("role") or "assistant", "content": None}
        message.update(copy.deepcopy({k: v for k, v in acc.items() if k != "role"}))
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [_finished_call(c) for c in _by_index(calls)]
        return message


# ---------------------------------------------------------------- deltas

KEYS = ["content", "refusal", "reasoning_content", "arguments", "text", "name", "id", "type", "index",
        "role", "extra_content", "function", "tool_calls", "reasoning_details", "x"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=4))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=10)
call_fragments = st.builds(
    lambda index, text: {"tool_calls": [{"index": index, "function": {"arguments": text}}]},
    st.integers(0, 2), st.text(max_size=5))
deltas = st.one_of(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), call_fragments,
                   st.builds(lambda text: {"content": text}, st.text(max_size=5)), values)
choices = st.fixed_dictionaries({"delta": deltas}, optional={
    "index": st.sampled_from([0, 1, True, None, "1", 2.0]),
    "finish_reason": st.sampled_from([None, "stop", "length", 3])})
chunks = st.one_of(
    st.fixed_dictionaries({"choices": st.lists(choices, max_size=2)}, optional={
        "id": st.sampled_from(["c-1", "", None, 5]), "model": st.sampled_from(["m", "", None]),
        "usage": st.sampled_from([None, {"prompt_tokens": 1}, 3])}),
    st.fixed_dictionaries({"choices": st.just([]), "usage": st.just({"total_tokens": 2})}),
    st.fixed_dictionaries({"error": st.sampled_from([{"message": "x"}, "boom", "", 0])}),
    values)


def wreck(value: Any) -> None:
    """Empty all a caller got, as a careless one might: both streams must come out of it alike."""
    if isinstance(value, dict):
        for inner in value.values():
            wreck(inner)
        value.clear()
    elif isinstance(value, list):
        for inner in value:
            wreck(inner)
        value.clear()


@given(st.lists(st.tuples(chunks, st.booleans()), max_size=20))
def test_chat_stream_rebuilds_what_the_concatenating_one_did(fed: list[tuple[Any, bool]]) -> None:
    new, old = ChatStream(), _OldChatStream()
    for chunk, read in fed:
        assert new.feed_json(copy.deepcopy(chunk)) is old.feed_json(copy.deepcopy(chunk))
        if read:
            for index in (0, 1, 2):
                message, before = new.message(index), old.message(index)
                assert message == before
                wreck(message)
                wreck(before)
    assert [new.message(i) for i in (0, 1, 2)] == [old.message(i) for i in (0, 1, 2)]
    assert (new.finish_reasons, new.usage, new.error, new.id, new.model) == \
        (old.finish_reasons, old.usage, old.error, old.id, old.model)


@given(st.lists(deltas, max_size=12))
def test_merge_delta_then_joined_is_the_old_merge(fed: list[Any]) -> None:
    new: dict[str, Any] = {}
    old: dict[str, Any] = {}
    for delta in fed:
        if isinstance(delta, dict):
            merge_delta(new, delta)
            _old_merge_delta(old, delta)
    assert joined(new) == old


# ---------------------------------------------------------------- the cost of a long argument

class _CountedText(str):
    """A fragment that counts how often text is added to it, as a concatenating merge does."""

    additions = 0

    def __add__(self, other: str) -> _CountedText:
        _CountedText.additions += 1
        return _CountedText(str(self) + other)

    def __radd__(self, other: str) -> _CountedText:
        _CountedText.additions += 1
        return _CountedText(other + str(self))


def test_string_deltas_are_joined_once_on_read_not_copied_per_chunk() -> None:
    _CountedText.additions = 0
    stream = ChatStream()
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
    stream.feed_json({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    pieces = [_CountedText(f"{n:05d}") for n in range(2_000)]
    for piece in pieces:
        stream.feed_json({"choices": [{"index": 0, "delta": {
            "content": piece, "tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}]})
    assert _CountedText.additions == 0
    message = stream.message()
    assert message is not None and message["content"] == "".join(pieces)
    assert message["tool_calls"][0]["function"]["arguments"] == "".join(pieces)
    assert _CountedText.additions == 0


def test_deltas_after_a_read_still_add_up() -> None:
    stream = ChatStream()
    for text in ("a", "b"):
        stream.feed_json({"choices": [{"index": 0, "delta": {"content": text}}]})
    assert stream.message() == {"role": "assistant", "content": "ab"}
    stream.feed_json({"choices": [{"index": 0, "delta": {"content": "c"}}]})
    assert stream.message() == {"role": "assistant", "content": "abc"}


# ---------------------------------------------------------------- the per-token short way

# Chunks as a streamed answer sends them, one piece of text each, and the near misses the
# short way must leave to the general one: each changes one thing (a second key, another
# index, a finish, usage, an error, text that is not a string).
def _token(text: Any = "t", index: Any = 0, extra: dict[str, Any] | None = None,
           finish: Any = None, **fields: Any) -> dict[str, Any]:
    return {"id": "c-1", "model": "m", "usage": None, **fields, "choices": [
        {"index": index, "delta": {"content": text, **(extra or {})}, "finish_reason": finish}]}


usual_tokens = st.builds(_token, st.text(max_size=3), st.sampled_from([0, 0, 0, 1]))
near_misses = st.one_of(
    st.builds(_token, text=st.sampled_from([None, 5, ["x"]])),
    st.builds(_token, index=st.sampled_from([True, 1.0, "0", None])),
    st.builds(_token, extra=st.sampled_from([{"role": "assistant"}, {"refusal": "no"},
                                             {"tool_calls": []}])),
    st.builds(_token, finish=st.sampled_from(["stop", "length", 3])),
    st.builds(_token, usage=st.sampled_from([{"prompt_tokens": 1}, 3, "x"])),
    st.builds(_token, error=st.sampled_from([{"message": "x"}, "boom", 0])),
    st.builds(lambda: {"id": "c-1", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]}))


@settings(max_examples=300)
@given(st.lists(st.one_of(usual_tokens, usual_tokens, near_misses, near_misses, chunks),
                min_size=3, max_size=16))
def test_the_per_token_short_way_folds_chunks_as_the_general_one(fed: list[Any]) -> None:
    new, old = ChatStream(), _OldChatStream()
    for chunk in fed:
        assert new.feed_json(copy.deepcopy(chunk)) is old.feed_json(copy.deepcopy(chunk))
    assert [new.message(i) for i in (0, 1, 2)] == [old.message(i) for i in (0, 1, 2)]
    assert (new.finish_reasons, new.usage, new.error, new.id, new.model) == \
        (old.finish_reasons, old.usage, old.error, old.id, old.model)


def test_the_usual_token_chunk_takes_the_short_way() -> None:
    """The property above only means something if the short way runs: it does once the
    stream's id, model and text are under way."""
    stream = ChatStream()
    token = {"id": "c-1", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "a"}, "finish_reason": None}], "usage": None}
    stream.feed_json({**token, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                   "content": ""}}]})
    stream.feed_json(token)
    assert not _next_text(stream._choices, {**token, "choices": [
        {"index": 0, "delta": {"content": "b"}, "finish_reason": "stop"}]})
    assert _next_text(stream._choices, token)
    assert stream.message() == {"role": "assistant", "content": "aa"}
