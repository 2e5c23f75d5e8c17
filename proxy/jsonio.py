"""JSON in and out: orjson for speed, the standard library for what orjson refuses.

Clients send JSON that orjson rejects and upstreams accept: lone surrogates (`"\\ud800"`) and
integers beyond 64 bits. The proxy must carry them, not fail on them, so every parse and every
serialization of client data goes through here.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

JSONDecodeError = ValueError  # both orjson's and the standard library's errors are ValueErrors


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
        return json.loads(text)


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=sort_keys,
                          allow_nan=False).encode()


def dumps_text(value: Any) -> str:
    return dumps(value).decode()
