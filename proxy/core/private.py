"""Where provider-private reasoning state lives in a message, and which kind each piece is.

The sanitizer's policy says what goes (`Rule`); this module knows the fields (PROTOCOL.md §4):
plain text (`reasoning_content`, `reasoning`), lists that are chain-bound as soon as one element
is signed or encrypted (`reasoning_details`, `thinking_blocks`, LiteLLM `reasoning_items`: they
must come back unmodified, so they go whole or stay whole), Anthropic-style thinking parts in
`content`, and Gemini `thought_signature`s on tool calls and messages. LiteLLM's
`provider_specific_fields` (PROTOCOL.md §4.7) is a bag of whatever the provider returned: not
reasoning the proxy can classify, so only a rule that leaves no private state at all
(`Rule.extras`) removes it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proxy.conversation import THINKING_PARTS, Api, Entry, Kind, replaced

GEMINI_STAND_IN = "skip_thought_signature_validator"
PLAIN_KEYS = ("reasoning_content", "reasoning")
LIST_KEYS = ("reasoning_details", "thinking_blocks", "reasoning_items")
EXTRA_KEYS = ("provider_specific_fields",)
_ALL_KEYS = (*PLAIN_KEYS, *LIST_KEYS, *EXTRA_KEYS, "extra_content")
_STRIPPABLE = ("private.strippable",)


@dataclass(frozen=True, slots=True)
class Rule:
    blobs: bool  # remove chain-bound blobs
    plain: bool  # remove plain reasoning text
    stand_in: bool = False  # put Gemini's stand-in where a signature was, instead of removing it
    extras: bool = False  # remove LiteLLM's provider_specific_fields too


@dataclass
class Tally:
    blobs: Counter[str] = field(default_factory=Counter)
    plain: Counter[str] = field(default_factory=Counter)
    stand_ins: int = 0


def chain_bound_item(entry: Entry) -> bool:
    if entry.api is not Api.RESPONSES:
        return False
    if entry.kind is Kind.REASONING:
        return bool(entry.raw.get("encrypted_content"))
    return entry.raw.get("type") == "compaction"


def item_kind(entry: Entry) -> str:
    return "reasoning_item" if entry.kind is Kind.REASONING else str(entry.raw.get("type"))


def is_blob(key: str, element: Any) -> bool:
    """Whether one element of a reasoning list is signed or encrypted (unknown shapes are)."""
    if not isinstance(element, dict):
        return True
    if key == "reasoning_items":
        return bool(element.get("encrypted_content"))
    kind = element.get("type")
    unsigned_text = kind in ("reasoning.text", "thinking") and not element.get("signature")
    return not (kind == "reasoning.summary" or unsigned_text)


def list_is_blob(key: str, value: Any) -> bool:
    return not isinstance(value, list) or any(is_blob(key, e) for e in value)


def strippable(entry: Entry) -> bool:
    """Whether a chat message is an assistant message with any private state at all: most
    are not, and a sanitizer pass then costs one memo read per message."""
    found = entry.memo.get(_STRIPPABLE)  # `memoized` inlined: this runs for every message
    if found is None:
        found = entry.memo[_STRIPPABLE] = entry.raw.get("role") == "assistant" and _has_private(entry)
    return found


def strip_message(entry: Entry, rule: Rule, tally: Tally) -> Entry:
    """A chat message without the private state `rule` removes (the same entry if none)."""
    if not (rule.blobs or rule.plain or rule.extras) or not strippable(entry):
        return entry
    raw = dict(entry.raw)
    touched = _strip_fields(raw, rule, tally)
    touched = _strip_thinking_parts(raw, rule, tally) or touched
    touched = _strip_signatures(raw, rule, tally) or touched
    return replaced(entry, raw) if touched else entry


def _has_private(entry: Entry) -> bool:
    raw = entry.raw
    if any(key in raw for key in _ALL_KEYS):
        return True
    content = raw.get("content")
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") in THINKING_PARTS
                                         for p in content):
        return True
    calls = raw.get("tool_calls")
    return isinstance(calls, list) and any(isinstance(c, dict) and "extra_content" in c for c in calls)


def _strip_fields(raw: dict[str, Any], rule: Rule, tally: Tally) -> bool:
    touched = False
    for key in PLAIN_KEYS:
        if key in raw and rule.plain:
            del raw[key]
            tally.plain[key] += 1
            touched = True
    for key in LIST_KEYS:
        if key not in raw:
            continue
        bound = list_is_blob(key, raw[key])
        if (rule.blobs if bound else rule.plain):
            del raw[key]
            (tally.blobs if bound else tally.plain)[key] += 1
            touched = True
    for key in EXTRA_KEYS:
        if key in raw and rule.extras:
            del raw[key]
            tally.blobs[key] += 1
            touched = True
    return touched


def _strip_thinking_parts(raw: dict[str, Any], rule: Rule, tally: Tally) -> bool:
    content = raw.get("content")
    if not isinstance(content, list):
        return False
    kept = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in THINKING_PARTS:
            bound = is_blob("thinking_blocks", part)
            if (rule.blobs if bound else rule.plain):
                (tally.blobs if bound else tally.plain)["thinking_part"] += 1
                continue
        kept.append(part)
    if len(kept) == len(content):
        return False
    # An emptied content list is not valid: null beside tool calls, else an empty string.
    raw["content"] = kept or (None if raw.get("tool_calls") else "")
    return True


def _strip_signatures(raw: dict[str, Any], rule: Rule, tally: Tally) -> bool:
    if not rule.blobs:
        return False
    touched = _edit_signature(raw, rule, tally)
    calls = raw.get("tool_calls")
    if isinstance(calls, list):
        new_calls = [_call_without_signature(call, rule, tally) for call in calls]
        if any(a is not b for a, b in zip(new_calls, calls, strict=True)):
            raw["tool_calls"] = new_calls
            touched = True
    return touched


def _call_without_signature(call: Any, rule: Rule, tally: Tally) -> Any:
    if not isinstance(call, dict):
        return call
    edited = dict(call)
    return edited if _edit_signature(edited, rule, tally) else call


def _edit_signature(holder: dict[str, Any], rule: Rule, tally: Tally) -> bool:
    """Stand in for or remove `holder`'s `extra_content.google.thought_signature` (a copy)."""
    extra = holder.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    if not isinstance(google, dict) or "thought_signature" not in google:
        return False
    if rule.stand_in:
        if google["thought_signature"] == GEMINI_STAND_IN:
            return False
        holder["extra_content"] = {**extra, "google": {**google, "thought_signature": GEMINI_STAND_IN}}  # type: ignore[dict-item]
        tally.stand_ins += 1
        return True
    rest = {k: v for k, v in google.items() if k != "thought_signature"}
    outer = {k: v for k, v in extra.items() if k != "google"}  # type: ignore[union-attr]
    if rest:
        outer["google"] = rest
    if outer:
        holder["extra_content"] = outer
    else:
        del holder["extra_content"]
    tally.blobs["thought_signature"] += 1
    return True
