"""The body that goes upstream: the client's bytes with only what the proxy had to change.

Only the message array (`messages` / `input`) is replaced, spliced into the client's body so
every other field keeps its bytes; untouched elements keep theirs too. The one top-level field
the proxy may add is `stream_options.include_usage` (SPEC §6), inserted without re-serializing
the rest when the client sent no `stream_options`.
"""

from __future__ import annotations

from typing import Any

from proxy import jsonio

from proxy.conversation import CHAT, Entries, serialize
from proxy.inbound import Inbound

_SENTINEL = "\x00compaction-proxy-array\x00"


def same_entries(a: Entries, b: Entries) -> bool:
    return a is b or (len(a) == len(b) and all(x is y for x, y in zip(a, b)))


def needs_usage_chunk(inbound: Inbound) -> bool:
    """A chat stream whose client did not ask for usage: asked for, then hidden (SPEC §6)."""
    if inbound.api is not CHAT or not inbound.stream:
        return False
    options = inbound.doc.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return False  # the client's own invalid value goes up for upstream to judge
    return not (isinstance(options, dict) and options.get("include_usage") is True)


def build_body(inbound: Inbound, entries: Entries | None, *, include_usage: bool,
               extra_fields: dict[str, Any] | None = None) -> bytes:
    changed = (entries is not None and inbound.entries is not None
               and not same_entries(entries, inbound.entries))
    if not changed and not include_usage and not extra_fields:
        return inbound.body
    array = serialize(entries) if changed and entries is not None else None
    if extra_fields or (include_usage and "stream_options" in inbound.doc):
        return _reserialize(inbound, array, include_usage, extra_fields or {})
    body = inbound.body
    if array is not None:
        body = inbound.spans.splice(body, array) if inbound.spans else _reserialize(
            inbound, array, False, {})
    if include_usage:
        body = _insert_first_field(body, b'"stream_options":{"include_usage":true}')
    return body


def _insert_first_field(body: bytes, field: bytes) -> bytes:
    brace = body.index(b"{")
    rest = body[brace + 1:].lstrip()
    separator = b"" if rest.startswith(b"}") else b","
    return body[:brace + 1] + field + separator + body[brace + 1:]


def _reserialize(inbound: Inbound, array: bytes | None, include_usage: bool,
                 extra: dict[str, Any]) -> bytes:
    """Top-level fields change: serialize the object, but splice the array bytes back in."""
    doc = _exact_fields(inbound)
    doc.update(extra)
    if include_usage:
        options = doc.get("stream_options")
        doc["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                 "include_usage": True}
    if array is None and inbound.spans is not None:
        array = inbound.body[inbound.spans.start:inbound.spans.end]
    if array is None:
        return jsonio.dumps(doc)
    doc[inbound.array_key] = _SENTINEL
    return jsonio.dumps(doc).replace(jsonio.dumps(_SENTINEL), array, 1)


def _exact_fields(inbound: Inbound) -> dict[str, Any]:
    """The top-level fields as the client wrote them, for writing out again: orjson reads an
    integer beyond 64 bits as a float, so the fields beside the list (the list is spliced back
    as bytes) are parsed again by the exact parser. This path is rare: a stream whose
    `stream_options` the proxy extends, or fields it adds."""
    spans = inbound.spans
    if spans is None:
        return dict(inbound.doc)
    rest = inbound.body[:spans.start] + b"null" + inbound.body[spans.end:]
    fields = jsonio.loads_exact(rest.decode("utf-8", "surrogatepass"))
    return fields if isinstance(fields, dict) else dict(inbound.doc)
