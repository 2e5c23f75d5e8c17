"""Stable message identity (SPEC §3).

A message's digest is taken over its canonical form: role, normalized content, tool calls as
id/name/arguments, tool_call_id, name; no nulls, no key-order effect, no provider-private
reasoning fields or thinking parts. So the client's echo of a response message has the digest
of the message the proxy relayed, whether keys were reordered, nulls dropped, `content` sent as
a string or as one text part, or reasoning fields and thinking parts kept or dropped. Responses
items that carry an `id` use it. Repeats of the same canonical message are told apart by an
occurrence counter (`ids`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from proxy import jsonio

from proxy.conversation import THINKING_PARTS, Api, Entry
from proxy.conversation import CHAT as _CHAT, RESPONSES as _RESPONSES
from proxy.lru import LRU

# `dict` first: parsed JSON is dicts, and for a dict `isinstance` then answers in C, without
# the ABC's Python-level `__instancecheck__`; other mappings still pass.
_MAPPING = (dict, Mapping)

_TEXT_PARTS = ("text", "input_text", "output_text")  # a tuple: a part's `type` may be unhashable
# Part fields that describe presentation or caching, not what the message says.
_PART_NOISE = frozenset({"annotations", "logprobs", "cache_control", "prompt_cache_breakpoint"})


def canonical(entry: Entry) -> dict[str, Any]:
    return canonical_chat(entry.raw) if entry.api is _CHAT else canonical_item(entry.raw)


def canonical_chat(message: Mapping[str, Any]) -> dict[str, Any]:
    get = message.get
    out: dict[str, Any] = {"role": get("role")}
    content = get("content")
    if type(content) is str:  # most messages: `_put`'s test, inline
        if content:
            out["content"] = content
    else:
        _put(out, "content", _content(content) if isinstance(content, list) else content)
    keys = message.keys()
    # Most messages carry few of these, often none: only those present are looked at (in
    # any order: a canonical form is compared and digested with its keys sorted).
    for key in keys & _OPTIONAL_FIELDS:
        _put(out, key, message[key])
    if keys.isdisjoint(_CALL_FIELDS):
        return out  # no call to read: most messages
    calls = get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [_call(c) for c in calls]
    legacy = get("function_call")
    if isinstance(legacy, _MAPPING):
        out["function_call"] = {"name": legacy.get("name"), "arguments": legacy.get("arguments")}
    return out


_OPTIONAL_FIELDS = frozenset({"refusal", "name", "tool_call_id"})
_CALL_FIELDS = frozenset({"tool_calls", "function_call"})


def canonical_item(item: Mapping[str, Any]) -> dict[str, Any]:
    type_ = item.get("type") or "message"
    out: dict[str, Any] = {"type": type_}
    for key in ("role", "call_id", "name", "arguments", "input"):
        _put(out, key, item.get(key))
    _put(out, "content", _content(item.get("content")))
    _put(out, "output", _content(item.get("output")))
    return out


def content_chat(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message's form as anchors compare it (`Identities.content_digest`)."""
    form = canonical_chat(message)
    # Most answers are text: every request's usage is recorded, so they skip the walk.
    return form if _CALL_FIELDS.isdisjoint(form) else _compact_arguments(form)


def _compact_arguments(form: dict[str, Any]) -> dict[str, Any]:
    """`form` with tool-call arguments written compactly, their keys in the order they came;
    `form` itself when they already are.

    A client that parsed the arguments writes them back with its own spacing and escapes
    (LangChain's `json.dumps`: `", "`, `"\\u00e9"`); its echo is still the same call. Compact
    arguments, as most upstreams send them, come out unchanged, and so does the digest."""
    calls = form.get("tool_calls")
    if calls:
        compact = [_compact_call(c) for c in calls]
        if any(a is not b for a, b in zip(compact, calls)):
            form = {**form, "tool_calls": compact}
    legacy = form.get("function_call")  # the legacy single call
    compact_legacy = _compact_call(legacy)
    if compact_legacy is not legacy:
        form = {**form, "function_call": compact_legacy}
    return _compact_call(form)  # a Responses call item holds its arguments itself


# Where `_compact_arguments` finds arguments: a chat form's calls, a Responses call item.
_ARGUMENT_KEYS = frozenset({"tool_calls", "function_call", "arguments"})


def _compact_call(call: Any) -> Any:
    arguments = call.get("arguments") if isinstance(call, dict) else None
    if not isinstance(arguments, str):
        return call
    try:
        compact = jsonio.dumps_text(jsonio.loads(arguments))
    except ValueError:  # not JSON (cut short, free-form): compared as it is
        return call
    return call if compact == arguments else {**call, "arguments": compact}


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != "" and value != []:
        out[key] = value


def _content(content: Any) -> Any:
    """A string, or the list of non-text parts with the text parts folded to strings."""
    if not isinstance(content, list):
        return content
    parts: list[Any] = []
    for part in content:
        if isinstance(part, _MAPPING) and part.get("type") in THINKING_PARTS:
            continue  # a client may drop it from its echo, and the sanitizer does
        if (isinstance(part, _MAPPING) and part.get("type") in _TEXT_PARTS
                and isinstance(part.get("text"), str)):
            parts.append(part["text"])
        elif isinstance(part, _MAPPING):
            parts.append(_strip(part))
        else:
            parts.append(part)
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return parts


def _strip(value: Any) -> Any:
    if isinstance(value, _MAPPING):
        return {k: _strip(v) for k, v in value.items() if v is not None and k not in _PART_NOISE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _call(call: Any) -> Any:
    if not isinstance(call, _MAPPING):
        return call
    if call.get("type") == "custom" and isinstance(call.get("custom"), _MAPPING):
        body = call["custom"]
        return {"id": call.get("id"), "name": body.get("name"), "input": body.get("input")}
    body = call.get("function") if isinstance(call.get("function"), _MAPPING) else {}
    return {"id": call.get("id"), "name": body.get("name"), "arguments": body.get("arguments")}


def digest_of(canonical_form: Mapping[str, Any]) -> str:
    # orjson called here, not through `jsonio.dumps` (a frame less: every answer's message
    # and every new entry is digested); what it refuses still goes there.
    try:
        data = orjson.dumps(canonical_form, option=_SORTED)
    except (orjson.JSONEncodeError, TypeError):
        data = jsonio.dumps(canonical_form, sort_keys=True)
    return hashlib.blake2b(data, digest_size=12).hexdigest()


_SORTED = orjson.OPT_SORT_KEYS


class Identities:
    """Digests of entries, cached by the digest of the client's bytes and the API (bounded)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self._cache: LRU[bytes, str] = LRU(max_entries)

    def digest(self, entry: Entry) -> str:
        if entry.api is _RESPONSES and entry.item_id:
            return f"id:{entry.item_id}"
        found = entry.memo.get("digest")
        return found if found is not None else self._digest_of(entry, None)

    def _digest_of(self, entry: Entry, form: dict[str, Any] | None) -> str:
        """`digest` of an entry that has none kept yet; `form`, its canonical form when the
        caller has it already."""
        if entry.key is None:
            found = digest_of(form if form is not None else canonical(entry))
        else:
            key = _cache_key(entry.api, entry.key)
            found = self._cache.get(key)
            if found is None:
                found = digest_of(form if form is not None else canonical(entry))
                self._cache.put(key, found)
        entry.memo["digest"] = found
        return found

    def content_digest(self, entry: Entry) -> str:
        """The digest of what an entry says, ignoring a Responses item's server `id` and how
        tool-call arguments are spaced and escaped (`content_chat`).

        Anchors match on this: the proxy's own sanitizer drops `fc_`/`msg_` ids from items
        whose reasoning item it removed, clients re-serialize arguments they parsed, and the
        echo must still be recognised. An estimate asks it of the few entries where a kept
        anchor's echo would be, each once (memo, then the cache by client bytes).
        """
        found = entry.memo.get("content")
        if found is not None:
            return found
        key = None if entry.key is None else b"c" + _cache_key(entry.api, entry.key)
        found = None if key is None else self._cache.get(key)
        if found is None:
            form = canonical(entry)
            # A form without arguments anywhere (most messages) has nothing to compact.
            compact = form if form.keys().isdisjoint(_ARGUMENT_KEYS) else _compact_arguments(form)
            # Nothing to ignore (no server id, compact arguments): the entry's own digest,
            # most often known already, not a second hash of the same form; when not, made
            # from this form, not a second one.
            if compact is form and not entry.item_id:
                found = entry.memo.get("digest") or self._digest_of(entry, form)
            else:
                found = digest_of(compact)
            if key is not None:
                self._cache.put(key, found)
        entry.memo["content"] = found
        return found

    def ids(self, entries: Sequence[Entry]) -> list[str]:
        return with_occurrences(self.digest(e) for e in entries)


def _cache_key(api: Api, key: bytes) -> bytes:
    """The cache key of an entry whose client bytes have the digest `key`. SDKs send the same bytes to both APIs
    (`{"role": "user", "content": "continue"}`), which read them as different messages: keyed
    by the bytes alone, an id would depend on which API sent them first, and change with a
    restart (a checkpoint's prefix digest is made of ids)."""
    return key if api is _CHAT else b"r" + key


def with_occurrences(digests: Iterable[str]) -> list[str]:
    """`digest#n`, n counting earlier entries with the same digest, so repeats stay distinct."""
    seen: dict[str, int] = {}
    out = []
    for d in digests:
        n = seen.get(d, 0)
        seen[d] = n + 1
        out.append(f"{d}#{n}")
    return out
