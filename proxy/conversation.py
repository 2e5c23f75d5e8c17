"""The one internal form of a conversation, shared by chat `messages` and Responses `input`.

A conversation is a tuple of `Entry`, one per element of the wire list, in order. An entry keeps
the element's parsed JSON (`raw`, never mutated) and, while untouched, the exact bytes the client
sent (`source`), so an untouched element goes upstream byte-identical. Stages are written once
against the derived fields (`kind`, `calls`, `answers`) and the helpers below; only the helpers
know the two wire dialects.

Chat:      an assistant message with `tool_calls` is one ASSISTANT entry with several `calls`;
           each `tool` message is a RESULT entry.
Responses: each `function_call` / `custom_tool_call` / `*_call` item is a CALL entry with one
           call; each `*_call_output` is a RESULT; `reasoning` items are REASONING entries.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from proxy import jsonio


class Api(StrEnum):
    CHAT = "chat"
    RESPONSES = "responses"


# The members as module constants, for the request path: on Python 3.11 an attribute of an
# Enum class is read through `EnumType.__getattr__`'s hook (some 600 instructions), a module
# constant in a dict lookup (`proxy.core.kinds` has the rest, for the core's loops).
CHAT, RESPONSES = Api.CHAT, Api.RESPONSES


class Kind(StrEnum):
    INSTRUCTION = "instruction"  # system or developer message
    USER = "user"
    ASSISTANT = "assistant"  # assistant message; in chat it may carry tool calls
    CALL = "call"  # Responses tool-call item
    RESULT = "result"  # chat `tool` message or Responses `*_call_output` item
    REASONING = "reasoning"  # Responses `reasoning` item
    OTHER = "other"  # anything else: carried through untouched


# The members as module constants (`proxy.core.kinds` re-exports them for the core's loops): a
# member read off its class is an unspecialized attribute load in Python 3.11, about 900
# instructions (callgrind), a global a few; entries are built and their kinds compared on
# every request.
INSTRUCTION, USER, ASSISTANT = Kind.INSTRUCTION, Kind.USER, Kind.ASSISTANT
CALL, RESULT, REASONING, OTHER = Kind.CALL, Kind.RESULT, Kind.REASONING, Kind.OTHER
# A Responses message item's kind by its role (a str).
_MESSAGE_KINDS = {"system": INSTRUCTION, "developer": INSTRUCTION, "user": USER,
                  "assistant": ASSISTANT}


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # function arguments (a JSON string) or a custom tool's free-form input
    custom: bool = False


@dataclass(frozen=True, slots=True)
class Entry:
    api: Api
    kind: Kind
    raw: dict[str, Any]
    source: bytes | None = None
    role: str | None = None
    calls: tuple[ToolCall, ...] = ()
    answers: str | None = None
    item_id: str | None = None
    key: bytes | None = field(default=None, compare=False)
    # Values derived from this entry (token counts, digests), kept on it so a reused entry
    # costs an attribute read instead of a cache lookup. Never part of what the entry says.
    memo: dict[Any, Any] = field(default_factory=dict, init=False, compare=False, repr=False)
    # `key`, or for client bytes with prompt-cache markers, the digest of the bytes without
    # them: what usage anchors compare (`anchors.projection_digest`).
    anchor_key: bytes | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A digest of the client's bytes: the cache key for everything derived from an element.
        if self.source is not None and self.key is None:
            object.__setattr__(self, "key", hashlib.blake2b(self.source, digest_size=16).digest())
        anchor_key = self.key
        if self.source is not None and _CACHE_MARKER in self.source:
            anchor_key = hashlib.blake2b(without_cache_markers(self.source), digest_size=16).digest()
        object.__setattr__(self, "anchor_key", anchor_key)

    @property
    def untouched(self) -> bool:
        return self.source is not None

    def to_bytes(self) -> bytes:
        return self.source if self.source is not None else jsonio.dumps(self.raw)


Entries = tuple[Entry, ...]

# Anthropic-style prompt-cache breakpoints that clients (Cline, OpenHands through LiteLLM or
# OpenRouter) move to their newest messages every turn. Not content: no token is counted for
# them. A marker's value is a flat object (`{"type": "ephemeral", "ttl": "1h"}`) or null; a
# quote inside a JSON string is escaped, so text that mentions the key never matches.
_CACHE_MARKER = b'"cache_control"'
# Each pattern starts at a literal, so a long run of whitespace is scanned once, not once per
# position in it (a hostile body must not make this quadratic).
_MARKER_AFTER = re.compile(rb',\s*"cache_control"\s*:\s*(?:\{[^{}]*\}|null)')
_MARKER_FIRST = re.compile(rb'"cache_control"\s*:\s*(?:\{[^{}]*\}|null)\s*,?\s*')


def without_cache_markers(data: bytes) -> bytes:
    """`data` with every `cache_control` key and value cut out, as the same client would have
    written the element without them."""
    return _MARKER_FIRST.sub(b"", _MARKER_AFTER.sub(b"", data))

_INSTRUCTION_ROLES = frozenset({"system", "developer"})
# Responses outputs whose `output` is not text (see `takes_text_output`). This and the tuple
# below are tuples, not sets: a client's `type` may be a list or an object, which a set lookup
# raises on.
_STRUCTURED_OUTPUTS = ("computer_call_output", "shell_call_output")
# Anthropic-style reasoning inside a chat message's `content` (PROTOCOL.md §4): private state,
# not what the message says.
THINKING_PARTS = ("thinking", "redacted_thinking")


# ---------------------------------------------------------------- reading the wire form

def entry_from_chat(message: Any, source: bytes | None = None) -> Entry:
    if not isinstance(message, dict):
        return Entry(CHAT, OTHER, {"value": message}, source)
    role = message.get("role")
    if not isinstance(role, str):
        role = None  # an object or a list is no role (and unhashable): upstream judges it
    if role in _INSTRUCTION_ROLES:
        kind = INSTRUCTION
    elif role == "user":
        kind = USER
    elif role == "assistant":
        kind = ASSISTANT
    elif role == "tool":
        answers = message.get("tool_call_id")
        kind = RESULT if isinstance(answers, str) else OTHER
        return Entry(CHAT, kind, message, source, role, answers=answers if kind is RESULT else None)
    else:
        kind = OTHER
    calls = _chat_calls(message.get("tool_calls")) if kind is ASSISTANT else ()
    return Entry(CHAT, kind, message, source, role, calls)


def _chat_calls(tool_calls: Any) -> tuple[ToolCall, ...]:
    if not isinstance(tool_calls, list):
        return ()
    calls = []
    for call in tool_calls:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            continue
        if call.get("type") == "custom" and isinstance(call.get("custom"), dict):
            body = call["custom"]
            calls.append(ToolCall(call["id"], str(body.get("name", "")), _text(body.get("input")), True))
        else:
            body = call.get("function") if isinstance(call.get("function"), dict) else {}
            calls.append(ToolCall(call["id"], str(body.get("name", "")), _text(body.get("arguments"))))
    return tuple(calls)


def entry_from_responses(item: Any, source: bytes | None = None) -> Entry:
    if not isinstance(item, dict):
        return Entry(RESPONSES, OTHER, {"value": item}, source)
    type_ = item.get("type")
    item_id = item.get("id") if isinstance(item.get("id"), str) else None
    role = item.get("role") if isinstance(item.get("role"), str) else None
    if type_ in (None, "message") and role is not None:
        kind = _MESSAGE_KINDS.get(role, OTHER)
        return Entry(RESPONSES, kind, item, source, role, item_id=item_id)
    if type_ == "reasoning":
        return Entry(RESPONSES, REASONING, item, source, item_id=item_id)
    call_id = item.get("call_id")
    if not isinstance(call_id, str) and type_ == "local_shell_call_output":
        call_id = item.get("id")  # the SDK types name the call in `id`, the server in `call_id`
    if isinstance(type_, str) and isinstance(call_id, str):
        if type_.endswith("_call_output"):
            return Entry(RESPONSES, RESULT, item, source, answers=call_id, item_id=item_id)
        if type_.endswith("_call"):
            custom = type_ == "custom_tool_call"
            arguments = item.get("input") if custom else item.get("arguments", item.get("action"))
            call = ToolCall(call_id, str(item.get("name", type_)), _text(arguments), custom)
            return Entry(RESPONSES, CALL, item, source, calls=(call,), item_id=item_id)
    return Entry(RESPONSES, OTHER, item, source, role, item_id=item_id)


def reference_id(entry: Entry) -> str | None:
    """The id a Responses `item_reference` names (an item upstream keeps stored, PROTOCOL.md
    §6.2); None for any other entry. Its `type` is optional (the SDK's `ItemReference`):
    `{"id": "fc_..."}` is one too, as no other input item goes without both type and role."""
    if entry.kind is OTHER and entry.api is RESPONSES and entry.item_id is not None:
        type_ = entry.raw.get("type")
        if type_ == "item_reference" or (type_ is None and entry.role is None):
            return entry.item_id
    return None


def entry_from(api: Api, element: Any, source: bytes | None = None) -> Entry:
    return entry_from_chat(element, source) if api is CHAT else entry_from_responses(element, source)


def entries_from(api: Api, elements: Sequence[Any], sources: Sequence[bytes] | None = None,
                 previous: Sequence[Entry] = ()) -> Entries:
    """Entries of a wire list; an element with the same bytes at the same place in `previous`
    (the thread's last request) is that very entry again, so a steady request builds only
    what is new."""
    if sources is None:
        return tuple(entry_from(api, e) for e in elements)
    out = []
    for i, (element, source) in enumerate(zip(elements, sources, strict=True)):
        if i < len(previous) and previous[i].source == source and previous[i].api is api:
            out.append(previous[i])
        else:
            out.append(entry_from(api, element, source))
    return tuple(out)


def serialize(entries: Iterable[Entry]) -> bytes:
    """The JSON array of the entries: original bytes where untouched."""
    return b"[" + b",".join(e.to_bytes() for e in entries) + b"]"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return jsonio.dumps_text(value)


# ---------------------------------------------------------------- reading content

def content_text(entry: Entry) -> str:
    """The visible text of an entry: message text, a tool result's output, a call's arguments."""
    raw = entry.raw
    if entry.kind is RESULT:
        return _parts_text(raw.get("content") if entry.api is CHAT else raw.get("output"))
    if entry.kind is CALL:
        return "\n".join(c.arguments for c in entry.calls)
    if entry.kind is REASONING:
        return ""
    return _parts_text(raw.get("content"))


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
            elif isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
        elif isinstance(part, str):
            texts.append(part)
    return "\n".join(texts)


TEXT_PARTS = frozenset(("text", "input_text", "output_text", "refusal"))


def has_non_text_parts(entry: Entry) -> bool:
    """True when content carries images, audio or files (never restored as text)."""
    return bool(non_text_parts(entry))


def non_text_parts(entry: Entry) -> tuple[dict[str, Any], ...]:
    """The content parts that are not text (images, audio, files), as the client sent them."""
    key = "output" if entry.kind is RESULT and entry.api is RESPONSES else "content"
    content = entry.raw.get(key)
    if not isinstance(content, list):
        return ()
    return tuple(p for p in content if isinstance(p, dict) and p.get("type") not in TEXT_PARTS)


def tool_name(entry: Entry) -> str | None:
    """The name of the only call an entry makes, when it makes exactly one."""
    return entry.calls[0].name if len(entry.calls) == 1 else None


# ---------------------------------------------------------------- building new entries

def replaced(entry: Entry, raw: dict[str, Any]) -> Entry:
    """The same element with a new body; it no longer carries the client's bytes."""
    return entry_from(entry.api, raw)


def with_result_text(entry: Entry, text: str) -> Entry:
    """A tool result whose output is `text` (ids and every other field kept)."""
    key = "content" if entry.api is CHAT else "output"
    return replaced(entry, {**entry.raw, key: text})


def takes_text_output(entry: Entry) -> bool:
    """Whether a tool result's output may become text: not a Responses output that holds a
    screenshot object or a list of command outcomes (openai-python `response_input_item_param.py`)."""
    return entry.api is CHAT or entry.raw.get("type") not in _STRUCTURED_OUTPUTS


def with_call_arguments(entry: Entry, index: int, arguments: str) -> Entry:
    """An entry whose `index`-th call has new arguments (or custom input); for a Responses
    call that carries an `action` object instead (`shell_call`, `computer_call`, ...), that
    object as `arguments` parse (the same entry when they are not an object)."""
    raw = entry.raw
    if entry.api is RESPONSES:
        if entry.calls[0].custom:
            return replaced(entry, {**raw, "input": arguments})
        if "arguments" in raw or not isinstance(raw.get("action"), dict):
            return replaced(entry, {**raw, "arguments": arguments})
        try:
            action = jsonio.loads(arguments)
        except ValueError:
            return entry
        return replaced(entry, {**raw, "action": action}) if isinstance(action, dict) else entry
    # By position among the calls `_chat_calls` read, not by id: two parallel calls may share
    # one, and a custom call's input must not land in the other's JSON arguments.
    tool_calls = list(raw["tool_calls"])
    at = [k for k, c in enumerate(tool_calls) if isinstance(c, dict) and isinstance(c.get("id"), str)][index]
    call = tool_calls[at]
    if call.get("type") == "custom" and isinstance(call.get("custom"), dict):
        tool_calls[at] = {**call, "custom": {**call["custom"], "input": arguments}}
    else:
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        tool_calls[at] = {**call, "function": {**function, "arguments": arguments}}
    return replaced(entry, {**raw, "tool_calls": tool_calls})


def without_keys(entry: Entry, keys: Iterable[str]) -> Entry:
    drop = [k for k in keys if k in entry.raw]
    if not drop:
        return entry
    return replaced(entry, {k: v for k, v in entry.raw.items() if k not in drop})


def make_result(api: Api, call: ToolCall, text: str, call_type: str | None = None) -> Entry:
    """A tool result answering `call` (used for the explicit cancelled results of repair); in
    Responses, the output item of the call's type (`call_type`: a function call by default)
    in the shape that type takes (openai-python `response_input_item_param.py`)."""
    if api is CHAT:
        return entry_from_chat({"role": "tool", "tool_call_id": call.id, "content": text})
    if call_type is None or call_type == "function_call":
        call_type = "custom_tool_call" if call.custom else "function_call"
    item: dict[str, Any] = {"type": f"{call_type}_output", "call_id": call.id, "output": text}
    if call_type == "shell_call":
        # A list of outcomes; 130 is what a shell reports for a command interrupted by Ctrl-C.
        item["output"] = [{"stdout": "", "stderr": text, "outcome": {"type": "exit", "exit_code": 130}}]
    elif call_type == "apply_patch_call":
        item["status"] = "failed"  # required: `completed` or `failed`; no result was recorded
    return entry_from_responses(item)


def make_user(api: Api, text: str) -> Entry:
    if api is CHAT:
        return entry_from_chat({"role": "user", "content": text})
    return entry_from_responses({"type": "message", "role": "user",
                                 "content": [{"type": "input_text", "text": text}]})


def make_user_parts(api: Api, parts: list[Any]) -> Entry:
    """A user message of content parts, as each API writes them."""
    if api is CHAT:
        return entry_from_chat({"role": "user", "content": parts})
    return entry_from_responses({"type": "message", "role": "user", "content": parts})


def make_assistant(api: Api, text: str) -> Entry:
    if api is CHAT:
        return entry_from_chat({"role": "assistant", "content": text})
    return entry_from_responses({"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": text,
                                              "annotations": []}]})


# ---------------------------------------------------------------- structure

def leading_instructions(entries: Sequence[Entry]) -> int:
    """How many entries at the start are system/developer messages."""
    n = 0
    while n < len(entries) and entries[n].kind is INSTRUCTION:
        n += 1
    return n


def latest_user_index(entries: Sequence[Entry]) -> int | None:
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].kind is USER:
            return i
    return None
