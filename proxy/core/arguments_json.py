"""A call's arguments JSON, read and written again the same: what truncate cuts out of its
strings is the only change.

orjson reads and writes the common arguments, fast, as it always did: that written form is in
every thread's cached prompt prefix, so it must not move. But orjson keeps only the last value
of a key written twice, reads an integer past 64 bits as a float, and refuses a number past a
float's range and a lone-surrogate escape. Those arguments are read again by the standard
library with hooks: an object that names a key twice becomes `Members` (its pairs in order),
and a number no float or int holds (past a float's range, which the standard library reads as
infinity, or of more digits than Python reads) becomes `Number`, its text written back as it
came. Anything else reads as it always did and is written as it always was.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

NOT_PARSED = object()
_INT64 = 2.0**63
# What orjson writes as a list or a dict itself: `Members` and `Number` are written by `_write`.
_PLAIN_ONLY = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
_COLON_ESCAPE = re.compile(r"\\u003[aA]")  # a regex scans faster than `in` past many "\u00.."


class Members(list[tuple[str, Any]]):
    """An object that names a key more than once: every member, in order."""


@dataclass(frozen=True)
class Number:
    """A number as written, where no float or int read from it would write it back."""

    text: str


def loads(text: str) -> Any:
    """The value of `text`, or `NOT_PARSED` when it is not JSON (NaN and Infinity are not)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _loads_exact(text)  # a lone-surrogate escape, a number past a float's range
    # orjson reads integers beyond 64 bits as floats; the standard parser keeps them exact.
    if _has_huge_float(value) or _repeats_a_key(text, value):
        return _loads_exact(text)
    return value


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value, option=_PLAIN_ONLY).decode()
    except TypeError:  # integers beyond 64 bits, lone surrogates, and the written forms
        return _written(value)


def _loads_exact(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_object, parse_int=_int, parse_float=_float,
                          parse_constant=_not_json)
    except ValueError:
        return NOT_PARSED


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | Members:
    value = dict(pairs)
    return value if len(value) == len(pairs) else Members(pairs)


def _int(text: str) -> int | Number:
    try:
        return int(text)
    except ValueError:  # more digits than Python reads from text
        return Number(text)


def _float(text: str) -> float | Number:
    value = float(text)
    return value if math.isfinite(value) else Number(text)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _has_huge_float(value: Any) -> bool:
    if isinstance(value, float):
        return abs(value) >= _INT64
    if isinstance(value, list):
        return any(_has_huge_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_huge_float(v) for v in value.values())
    return False


def _repeats_a_key(text: str, value: Any) -> bool:
    """Whether `text` may name a key twice in an object, of which `value` (orjson's) kept one.
    Outside strings a colon only ever ends a key, and orjson writes every colon of a string
    as itself: `value` written again has as many colons as `text` unless members were dropped."""
    if _COLON_ESCAPE.search(text):
        return True  # an escaped colon, inside a string, is not among the text's colons
    try:
        written = orjson.dumps(value)
    except TypeError:  # nested deeper than orjson writes
        return True
    return text.count(":") != written.count(b":")


def _written(value: Any) -> str:
    """`dumps` for what orjson refuses, written piece by piece: every scalar as orjson writes
    it, or, when one is past orjson (an integer beyond 64 bits, a lone surrogate), every one as
    the standard library does (escaped, if a lone surrogate cannot go out as UTF-8); `Members`
    with every member, `Number` as it came."""
    try:
        return _write(value, _orjson_text)
    except TypeError:
        text = _write(value, _json_text)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return _write(value, _json_ascii)
        return text


def _write(value: Any, scalar: Callable[[Any], str]) -> str:
    if isinstance(value, Number):
        return value.text
    if isinstance(value, list):
        if isinstance(value, Members):
            return "{" + ",".join(scalar(k) + ":" + _write(v, scalar) for k, v in value) + "}"
        return "[" + ",".join(_write(v, scalar) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(scalar(k) + ":" + _write(v, scalar) for k, v in value.items()) + "}"
    return scalar(value)


def _orjson_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _json_ascii(value: Any) -> str:
    return json.dumps(value)
