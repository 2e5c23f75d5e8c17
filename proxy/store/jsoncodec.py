"""JSON for what the stores persist: orjson, with a stdlib fallback for lone surrogates.

orjson rejects strings holding lone surrogates (which the stdlib JSON parser lets into
message content); those documents are written as ASCII JSON with `\\udXXX` escapes instead,
and read back the same way. Either way a persisted document is valid UTF-8 JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def dumps_text(value: Any) -> str:
    return dumps(value).decode("utf-8")


def dumps_texts(values: list[Any]) -> list[str]:
    """`dumps_text` of each: a batch of queued writes serializes its anchors in C, and one that
    orjson refuses sends all of them the fallback's way."""
    try:
        return list(map(bytes.decode, map(orjson.dumps, values)))
    except orjson.JSONEncodeError:
        return list(map(dumps_text, values))


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
