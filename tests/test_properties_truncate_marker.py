"""Truncate cuts only long strings, each with a marker that says how much it cut (SPEC §4.2).

SPEC: "tool-call arguments longer than a limit have their long string values cut with a marker
that says how much was cut; arguments stay valid JSON". So, read back as JSON (every member of
every object, in order; a key written twice as its last value), the cut arguments are the client's with each
string either as sent or its first characters followed by the marker, whose number and the
characters kept add up to the string's length. Arguments are drawn as clients write them:
any spacing, escaped or raw non-ASCII, and now and then a key written twice.
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
    st.builds(lambda w, n: w * n, st.sampled_from(("x", "数据", "a\n", "\"q\"", "🙂")), st.integers(50, 900))
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | _strings,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10)


def _pairs(pairs: list[tuple[str, Any]]) -> Any:
    # Every member in order; a key written twice means its last value, as JSON parsers read
    # it (RFC 8259 §4 leaves it to them; the cut writes the object once, last value kept).
    return ("object", list(dict(pairs).items()))


def _read(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_pairs)


@st.composite
def arguments(draw: st.DrawFn) -> str:
    value = draw(st.dictionaries(st.text(max_size=6), _values, min_size=1, max_size=5))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from(((",", ":"), (", ", ": "), (",\n  ", " : ")))))
    if draw(st.integers(0, 4)) == 0:  # a key written twice, as a model now and then writes it
        key = json.dumps(next(iter(value)))
        text = text[:-1] + f", {key}: {json.dumps(draw(_strings))}}}"
    return text


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
