"""`canonical_chat`'s short ways (a string content, no call fields) against the general
walk every message took before them, written out here as the reference."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.identity import _call, _content, _put, canonical_chat, digest_of
from tests.strategies import conversations


def reference(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.get("role")}
    content = message.get("content")
    _put(out, "content", _content(content) if isinstance(content, list) else content)
    for key in message.keys() & {"refusal", "name", "tool_call_id"}:
        _put(out, key, message[key])
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [_call(c) for c in calls]
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        out["function_call"] = {"name": legacy.get("name"), "arguments": legacy.get("arguments")}
    return out


_values = st.one_of(st.none(), st.just(""), st.just([]), st.text(max_size=4),
                    st.integers(), st.lists(st.fixed_dictionaries(
                        {"type": st.just("text"), "text": st.text(max_size=3)}), max_size=2))
_calls = st.one_of(_values, st.lists(st.fixed_dictionaries(
    {"id": st.text(max_size=3), "type": st.just("function"),
     "function": st.fixed_dictionaries({"name": st.text(max_size=3),
                                        "arguments": st.text(max_size=5)})}), max_size=2))
_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"])},
    optional={"content": _values, "refusal": _values, "name": _values, "tool_call_id": _values,
              "tool_calls": _calls, "annotations": _values,
              "function_call": st.one_of(_values, st.fixed_dictionaries(
                  {"name": st.text(max_size=3), "arguments": st.text(max_size=3)}))})


@given(_messages)
def test_any_message_has_the_canonical_form_of_the_general_walk(message: dict[str, Any]) -> None:
    form = canonical_chat(message)
    assert form == reference(message)
    assert digest_of(form) == digest_of(reference(message))


@given(conversations())
def test_conversation_messages_have_the_canonical_form_of_the_general_walk(
        messages: list[dict[str, Any]]) -> None:
    for message in messages:
        assert canonical_chat(message) == reference(message)
