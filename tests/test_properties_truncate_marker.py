"""Truncate cuts only long strings, each with a marker that says how much it cut (SPEC §4.2).

SPEC: "tool-call arguments longer than a limit have their long string values cut with a marker
that says how much was cut; arguments stay valid JSON". So, read back as JSON (every member of
every object, in order, a key written twice included), the cut arguments are the client's with
each string either as sent or its first characters followed by the marker, whose number and the
characters kept add up to the string's length, and every other value the same. Arguments are
drawn as clients write them: any spacing, escaped or raw non-ASCII, numbers in any written form,
and now and then a key written twice, at any depth.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.truncate import MARKER, cut_arguments

_MARK = re.compile(re.escape(MARKER).replace(r"\{n\}", r"(\d+)") + r"\Z")
_strings = st.text(st.characters(codec="utf-8"), max_size=40) | \
    st.builds(lambda w, n: w * n, st.sampled_from(("x", "数据", "a\n", "\"q\"", "🙂", "k:")), st.integers(50, 900))


def _pairs(pairs: list[tuple[str, Any]]) -> Any:
    # Every member in order: RFC 8259 §4 leaves a repeated key's meaning to the reader, so the
    # cut must not choose one for it.
    return ("object", pairs)


def _read(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_pairs)


_NUMBER_FORMS = st.sampled_from(("1.0", "1e5", "-0", "-0.0", "1E+2", "2.0e-400", "1E400", "-1e999",
                                  "0.1000000000000000055511151231257827"))
_numbers = st.integers(-2**70, 2**70).map(str) | _NUMBER_FORMS \
    | st.floats(allow_nan=False, allow_infinity=False).map(repr)


def _object(members: list[tuple[str, str]], comma: str) -> str:
    return "{" + comma.join(f"{json.dumps(k)}: {v}" for k, v in members) + "}"


@st.composite
def _members(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> list[tuple[str, str]]:
    members = draw(st.lists(st.tuples(st.text(max_size=6), inner), max_size=4))
    if members and draw(st.integers(0, 3)) == 0:  # a key written twice, as a model now and then writes it
        members.insert(draw(st.integers(0, len(members))), (draw(st.sampled_from(members))[0], draw(inner)))
    return members


def _containers(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # A named function, not a lambda: Hypothesis reads `extend`'s source to see that it
    # recurses, and a lambda's source it sometimes cannot find (a deprecation, an error here).
    return (st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]")
            | st.builds(_object, _members(inner), st.sampled_from((",", ", ", ",\n  "))))


@st.composite
def arguments(draw: st.DrawFn) -> str:
    ascii_only = draw(st.booleans())
    leaves = (st.sampled_from(("true", "false", "null")) | _numbers
              | _strings.map(lambda s: json.dumps(s, ensure_ascii=ascii_only)))
    value = st.recursive(leaves, _containers, max_leaves=10)
    return _object(draw(_members(value).filter(bool)), draw(st.sampled_from((",", ", "))))


def _check(old: Any, new: Any, keep: int) -> None:
    if isinstance(old, tuple):
        assert isinstance(new, tuple) and [k for k, _ in old[1]] == [k for k, _ in new[1]], (old, new)
        for (_, a), (_, b) in zip(old[1], new[1], strict=True):
            _check(a, b, keep)
    elif isinstance(old, list):
        assert isinstance(new, list) and len(old) == len(new)
        for a, b in zip(old, new, strict=True):
            _check(a, b, keep)
    elif isinstance(old, str) and old != new:
        assert isinstance(new, str)
        found = _MARK.search(new)
        assert found is not None, new[-80:]
        kept = new[:found.start()]
        assert old.startswith(kept) and len(kept) == keep and len(kept) + int(found.group(1)) == len(old)
    else:
        assert type(old) is type(new) and old == new, (old, new)


@given(arguments(), st.integers(0, 300))
def test_only_long_strings_are_cut_and_each_marker_counts_what_it_cut(text: str, keep: int) -> None:
    cut = cut_arguments(text, keep)
    _check(_read(text), _read(cut), keep)
