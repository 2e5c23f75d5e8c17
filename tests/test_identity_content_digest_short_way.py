"""`Identities.content_digest` skips compacting arguments for a canonical form that holds none
(no calls, no Responses `arguments`): `_compact_arguments` must give back that very form."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.conversation import entry_from_chat, entry_from_responses
from proxy.identity import (_ARGUMENT_KEYS, Identities, _compact_arguments, canonical,
                            canonical_chat, canonical_item, digest_of)

_values = st.one_of(st.none(), st.just(""), st.text(max_size=4), st.integers(),
                    st.lists(st.fixed_dictionaries({"type": st.just("text"),
                                                    "text": st.text(max_size=3)}), max_size=2),
                    st.fixed_dictionaries({}, optional={"name": st.text(max_size=2),
                                                        "arguments": st.text(max_size=6)}))
_chat = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"])},
    optional={"content": _values, "refusal": _values, "name": _values, "tool_call_id": _values,
              "function_call": _values,
              "tool_calls": st.lists(st.fixed_dictionaries(
                  {"id": st.text(max_size=2), "function": st.fixed_dictionaries(
                      {"name": st.text(max_size=2),
                       "arguments": st.sampled_from(['{"a": 1}', '{"a":1}', "x", ""])})}),
                  max_size=2)})
_items = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning"])},
    optional={"role": _values, "call_id": _values, "name": _values, "input": _values,
              "arguments": st.sampled_from(['{"b": 2}', '{"b":2}', "x", "", None]),
              "content": _values, "output": _values, "id": st.just("fc_1")})


@given(st.one_of(_chat.map(canonical_chat), _items.map(canonical_item)))
def test_a_form_without_argument_keys_compacts_to_itself(form: dict[str, Any]) -> None:
    if form.keys().isdisjoint(_ARGUMENT_KEYS):
        assert _compact_arguments(form) is form


@settings(max_examples=300)
@given(st.one_of(_chat.map(entry_from_chat), _items.map(entry_from_responses)))
def test_the_content_digest_is_the_digest_of_the_compacted_form(entry: Any) -> None:
    assert Identities().content_digest(entry) == digest_of(_compact_arguments(canonical(entry)))
