"""Truncate shortens long strings and nothing else (SPEC §4.2): a key written twice stays
twice, in its place, and a number stays the number the client wrote, whatever its size.
Arguments with no such key come out exactly as before: their cut form is part of every
thread's cached prompt prefix."""

from __future__ import annotations

import json
from typing import Any

from proxy.core.truncate import MARKER, cut_arguments, truncate
from tests.factories import assistant_calls, call, chat, stage_context, tool_result, user

LONG, CUT = "x" * 3000, "x" * 10 + MARKER.format(n=2990)


def _members(text: str) -> Any:
    return json.loads(text, object_pairs_hook=list)


def test_a_key_written_twice_keeps_both_values_in_order_each_cut() -> None:
    first_long = '{"path": "a.py", "content": "%s", "content": "short"}' % LONG
    assert _members(cut_arguments(first_long, 10)) == [
        ("path", "a.py"), ("content", CUT), ("content", "short")]
    last_long = '{"content": "short", "path": "a.py", "content": "%s"}' % LONG
    assert _members(cut_arguments(last_long, 10)) == [
        ("content", "short"), ("path", "a.py"), ("content", CUT)]


def test_a_key_written_twice_deep_inside_is_kept_too() -> None:
    text = '{"edits": [{"old": "%s", "new": "b", "new": "c"}, {"n": 1e5, "n": -0}]}' % LONG
    assert _members(cut_arguments(text, 10)) == [
        ("edits", [[("old", CUT), ("new", "b"), ("new", "c")], [("n", 100000.0), ("n", 0)]])]


def test_a_key_written_twice_with_an_escaped_colon_elsewhere_is_kept() -> None:
    # An escaped colon ("\u003a") is one the text does not show as a colon.
    text = '{"a\\u003a": "%s", "a": 1, "a": 2}' % LONG
    assert _members(cut_arguments(text, 10)) == [("a:", CUT), ("a", 1), ("a", 2)]


def test_a_number_beyond_a_float_stays_the_number_written() -> None:
    text = '{"big": 1E400, "neg": -2.5e999, "s": "%s"}' % LONG
    cut = cut_arguments(text, 10)
    assert cut == '{"big":1E400,"neg":-2.5e999,"s":"%s"}' % CUT  # was null, null
    beside_a_huge_int = '{"big": 1e400, "n": 123456789012345678901234567890, "s": "%s"}' % LONG
    cut = cut_arguments(beside_a_huge_int, 10)  # was Infinity: not JSON
    assert cut == '{"big":1e400,"n":123456789012345678901234567890,"s":"%s"}' % CUT


def test_an_integer_too_long_to_read_keeps_the_arguments_json() -> None:
    digits = "7" * 5000  # past Python's int-from-text limit (4,300 digits)
    cut = cut_arguments('{"n": %s, "s": "%s"}' % (digits, LONG), 10)
    assert cut == '{"n":%s,"s":"%s"}' % (digits, CUT)


def test_arguments_without_a_repeated_key_are_written_as_before() -> None:
    # The forms these inputs always had; a change would miss every thread's prompt cache once.
    numbers = '{"a": 1.0, "b": 1e5, "c": -0, "d": -0.0, "e": 1e16, "f": 2.0e-400, "s": "%s"}'
    assert cut_arguments(numbers % LONG, 10) == (
        '{"a":1.0,"b":100000.0,"c":0,"d":-0.0,"e":1e+16,"f":0.0,"s":"%s"}' % CUT)
    huge = '{"e": 1e16, "i": 123456789012345678901234567890, "s": "%s"}'
    assert cut_arguments(huge % LONG, 10) == (
        '{"e":1e+16,"i":123456789012345678901234567890,"s":"%s"}' % CUT)
    lone = '{"u": "\\ud800 ü", "s": "%s"}'
    assert cut_arguments(lone % LONG, 10) == '{"u":"\\ud800 \\u00fc","s":"%s"}' % CUT.replace(
        "…", "\\u2026")


def test_arguments_nested_deeper_than_python_walks_are_left_as_sent() -> None:
    # Valid JSON orjson reads (up to 1,024 levels) but Python's walk cannot: the old call must
    # not fail every request of its thread; as sent it is still what the client wrote.
    for depth in (990, 1020, 5000):
        deep = "[" * depth + '"%s"' % LONG + "]" * depth
        assert cut_arguments(deep, 10) == deep
    entries = chat(user("a"), assistant_calls(call("write_file", "c1", deep)), tool_result("c1"),
                   user("b"))
    out = truncate(entries, stage_context(entries, tail=1))
    assert out.entries[1].raw["tool_calls"][0]["function"]["arguments"] == deep
