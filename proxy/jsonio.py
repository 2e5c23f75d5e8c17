"""JSON in and out: orjson for speed, the standard library for what orjson refuses.

Clients send JSON that orjson rejects and upstreams accept (lone surrogates, `"\\ud800"`);
the proxy must carry it, not fail on it, so every parse and every serialization of client data
goes through here. orjson reads an integer beyond 64 bits as a float, without an error: where
parsed client fields are written out again, `proxy.outbound` parses them exactly.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

JSONDecodeError = ValueError  # both orjson's and the standard library's errors are ValueErrors


class NestedTooDeep(ValueError):
    """Valid JSON, maybe, but nested deeper than the parsers recurse (about 1,000 levels)."""


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
        try:
            return json.loads(text)
        except RecursionError:
            raise NestedTooDeep("arrays and objects are nested too deeply "
                                "(more than about 1,000 levels)") from None


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=sort_keys,
                          allow_nan=False).encode()


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


def dumps_indented(value: Any) -> str:
    """Indented text, for people to read (`inspect`); what orjson refuses as ASCII escapes."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=True, indent=2)
