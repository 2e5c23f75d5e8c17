"""JSON in and out: orjson for speed, the standard library for what orjson refuses.

Clients send JSON that orjson rejects and upstreams accept (lone surrogates, `"\\ud800"`);
the proxy must carry it, not fail on it, so every parse and every serialization of client data
goes through here. orjson reads an integer beyond 64 bits as a float, without an error: where
parsed client fields are written out again, `proxy.outbound` parses them exactly.

Depth: orjson reads up to 1,024 levels but writes only 255; the standard library recurses once
a level on Python's stack, which a request handler has partly used already. What the proxy read
it must be able to write, so the standard library gets room for `MAX_DEPTH` levels above the
caller (`_with_room`); deeper is `NestedTooDeep`, a 400 at the request's parse.

Numbers past a float's range (`1e400`): orjson refuses to read them and the standard library
reads them as inf. Both writers put such a number down as `null` (orjson does by itself), so a
value orjson refuses to write for another reason (a lone surrogate) is still written, as JSON.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

JSONDecodeError = ValueError  # both orjson's and the standard library's errors are ValueErrors
MAX_DEPTH = 1024  # orjson's own reading limit
# Levels of room beyond the value's: a read gets a few, a write more, so whatever the
# standard library read (for orjson refused it) it can write again.
_READ_ROOM, _WRITE_ROOM = MAX_DEPTH + 8, MAX_DEPTH + 64

T = TypeVar("T")


class NestedTooDeep(ValueError):
    """Valid JSON, maybe, but nested deeper than the parsers recurse (about 1,000 levels)."""


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
        return _with_room(_READ_ROOM, json.loads, text)


def loads_exact(text: str) -> Any:
    """The standard library's parse (integers of any size stay integers), as deep as `loads`."""
    return _with_room(_READ_ROOM, json.loads, text)


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except (orjson.JSONEncodeError, TypeError):
        return _with_room(_WRITE_ROOM, _stdlib_dumps, value, sort_keys).encode()


def _stdlib_dumps(value: Any, sort_keys: bool) -> str:
    try:
        return _strict_dumps(value, sort_keys)
    except ValueError:
        # A number past a float's range (`1e400` reads as inf): written as orjson writes it,
        # `null`, so the text is JSON and the same whichever writer wrote it.
        return _strict_dumps(_finite(value), sort_keys)


def _strict_dumps(value: Any, sort_keys: bool) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=sort_keys,
                      allow_nan=False)


def _finite(value: Any) -> Any:
    """`value` with every infinite or NaN float replaced by None. Loops, not comprehensions: a
    frame a level, as deep as `_with_room` lets the standard library write."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            out[key] = _finite(item)
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for item in value:
            items.append(_finite(item))
        return items
    return value


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


def dumps_indented(value: Any) -> str:
    """Indented text, for people to read (`inspect`); what orjson refuses as ASCII escapes."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except (orjson.JSONEncodeError, TypeError):
        return _with_room(_WRITE_ROOM, json.dumps, value, ensure_ascii=True, indent=2)


def _with_room(room: int, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call` (a standard-library parse or write), with Python's recursion limit raised for the
    call when the value is deep: `room` levels wherever the caller sits."""
    try:
        return call(*args, **kwargs)
    except RecursionError:
        pass  # the rare deep value: measured and retried below
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, _frames_in_use() + room))
    try:
        return call(*args, **kwargs)
    except RecursionError:
        raise NestedTooDeep(f"arrays and objects are nested too deeply (more than about "
                            f"{MAX_DEPTH:,} levels)") from None
    finally:
        sys.setrecursionlimit(limit)


def _frames_in_use() -> int:
    frame, count = sys._getframe(), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1
    return count
