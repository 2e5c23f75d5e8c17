"""Reading upstream rejections: context overflow (SPEC §9) and rejected private state (§7.4).

Providers spell the same errors many ways (PROTOCOL.md §3, §4): `{"error": {...}}`, a flat
object (Mistral, Cerebras), Anthropic's `{"type": "error", ...}`, Gemini's JSON array,
OpenRouter's upstream body as a string in `metadata.raw`, Ollama's error JSON inside a string,
LiteLLM's `ContextWindowExceededError` prefix, a Responses stream `error` / `response.failed`
event. `error_texts` flattens any of them into the lower-cased strings the rules look at;
only error objects are read, never a successful answer's content.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

_FIELDS = ("message", "code", "type", "status", "param", "detail", "error")
_MAX_DEPTH = 6

_OVERFLOW_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error",
                             "context_window_exceeded", "model_context_window_exceeded"})
_OVERFLOW_PHRASES = (
    "maximum context length",  # OpenAI, Azure, vLLM, DeepSeek, OpenRouter, Mistral
    "exceeds the context window",  # OpenAI Responses / Codex
    "prompt is too long",  # Anthropic, Bedrock
    "exceed context limit",  # Anthropic: input + max_tokens
    "model's maximum context limit",
    "is longer than the model's context length",
    "input tokens exceed the configured limit",
    "`inputs` tokens + `max_new_tokens` must be",
    "exceeds the available context size",  # llama.cpp, Ollama's runner
    "available context size",
    "exceeds the maximum number of tokens allowed",  # Gemini
    "reduce the length of the messages",  # OpenAI (older), Groq, Cerebras, DeepSeek
    "maximum prompt length is",  # xAI
    "exceeded model token limit",  # Moonshot
    "context length of only",  # LM Studio
    "when context the overflows",  # LM Studio
    "contextwindowexceedederror",  # LiteLLM proxy
    "too many input tokens",  # Bedrock
    "input is too long",  # Bedrock, Replicate
    "request payload size exceeds",  # Vertex
)
_OVERFLOW_PAIRS = (("input token count", "exceeds the maximum"),  # Gemini
                   ("current length is", "while limit is"),  # Cerebras
                   ("maximum input length is", "tokens"))
_OVERFLOW_PATTERNS = (re.compile(r"prompt tokens \(\d+\) exceed model maximum"),
                      re.compile(r"too large for model with \d+ maximum context"))  # Mistral
_NOT_OVERFLOW = ("string_above_max_length", "rate_limit", "rate limit", "tokens per minute",
                 "(tpm)", "too many requests", "quota")


def error_texts(body: Any, status: int = 400) -> list[str]:
    """The lower-cased strings of the error objects in `body` (bytes, text or parsed JSON)."""
    return [t.lower() for t in _error_strings(body, status)]


def _error_strings(body: Any, status: int) -> list[str]:
    """The strings of the error objects in `body`, as they are spelled, each cut to its first
    `_TEXT_READ` characters: what a provider says comes first, and the rest may be a client's
    value quoted back (a megabyte of it), which the patterns here would scan again and again."""
    doc = _parsed(body)
    if isinstance(doc, str):
        return [doc[:_TEXT_READ]] if status >= 400 and doc.strip() else []
    return [text[:_TEXT_READ] for text in _from_doc(doc, status, 0)]


_TEXT_READ = 16_384


def _parsed(body: Any) -> Any:
    if isinstance(body, (bytes, bytearray, memoryview)):
        body = bytes(body).decode("utf-8", "replace")
    if isinstance(body, str):
        stripped = body.strip()
        if stripped[:1] in ("{", "["):
            try:
                return orjson.loads(stripped)
            except orjson.JSONDecodeError:
                return body
        return body
    return body


def _from_doc(doc: Any, status: int, depth: int) -> Iterator[str]:
    if depth > _MAX_DEPTH:
        return
    if isinstance(doc, list):
        for item in doc:
            yield from _from_doc(item, status, depth + 1)
    elif isinstance(doc, dict):
        if doc.get("error"):
            yield from _from_error(doc["error"], depth + 1)
        elif doc.get("type") == "response.failed" and isinstance(doc.get("response"), dict):
            yield from _from_error(doc["response"].get("error"), depth + 1)
        elif status >= 400 or doc.get("type") == "error" or doc.get("object") == "error":
            yield from _from_error(doc, depth + 1)


def _from_error(error: Any, depth: int) -> Iterator[str]:
    """Every string field of an error object, following JSON carried inside strings."""
    if depth > _MAX_DEPTH or error is None:
        return
    if isinstance(error, str):
        inner = _parsed(error)
        if isinstance(inner, (dict, list)):
            yield from _from_doc(inner, 400, depth + 1)
        yield error
    elif isinstance(error, (int, float)):
        yield str(error)
    elif isinstance(error, list):
        for item in error:
            yield from _from_error(item, depth + 1)
    elif isinstance(error, dict):
        for key in _FIELDS:
            if key in error:
                yield from _from_error(error[key], depth + 1)
        metadata = error.get("metadata")
        if isinstance(metadata, dict) and "raw" in metadata:
            yield from _from_error(metadata["raw"], depth + 1)


# ---------------------------------------------------------------- context overflow

def is_context_overflow(status: int, body: Any) -> bool:
    """Whether upstream said the request does not fit the model's context window.

    Rate limits (429, and Groq's 413 "tokens per minute") and one over-long string
    (`string_above_max_length`) are not overflows: compaction would not help them.
    """
    if status == 429:
        return False
    texts = error_texts(body, status)
    if not texts or any(marker in t for t in texts for marker in _NOT_OVERFLOW):
        return False
    return any(_overflow_text(t) for t in texts)


def _overflow_text(text: str) -> bool:
    if text.strip() in _OVERFLOW_CODES:
        return True
    if any(p in text for p in _OVERFLOW_PHRASES):
        return True
    if any(a in text and b in text for a, b in _OVERFLOW_PAIRS):
        return True
    return any(p.search(text) for p in _OVERFLOW_PATTERNS)


# ---------------------------------------------------------------- rejected private state

class RetryAction(StrEnum):
    STRIP_BLOBS = "strip_blobs"  # drop chain-bound state: encrypted reasoning, signed thinking,
    # reasoning_details, signatures, and the fc_/msg_ ids that referenced dropped reasoning
    STAND_IN = "stand_in"  # put the provider's documented stand-in where a blob is demanded
    SIGNATURE_STAND_INS = "signature_stand_ins"  # the same, and on current-loop calls without one
    RESTORE_LOOP_BLOBS = "restore_loop_blobs"  # send the current loop's blocks as the client did
    DROP_PLAIN_REASONING = "drop_plain_reasoning"  # remove reasoning_content / reasoning
    REASONING_PLACEHOLDERS = "reasoning_placeholders"  # reasoning_content on tool-call messages
    DROP_UNREASONED = "drop_unreasoned"  # a strip, and the ids (items) naming missing reasoning


@dataclass(frozen=True)
class Retry:
    action: RetryAction
    reason: str  # what upstream rejected, for the log
    # The ids of the items the refusal names (where it names one), and those of the refusals
    # before it that this fix carries on (`retry_attempts.carried_on`).
    items: tuple[str, ...] = ()


# Order matters: the first rule whose every phrase is present wins.
_PRIVATE_RULES: tuple[tuple[tuple[str, ...], RetryAction, str], ...] = (
    (("invalid_encrypted_content",), RetryAction.STRIP_BLOBS, "encrypted reasoning rejected"),
    (("encrypted content", "could not be verified"), RetryAction.STRIP_BLOBS,
     "encrypted reasoning rejected"),
    (("items are not persisted when `store` is set to false",), RetryAction.STRIP_BLOBS,
     "reasoning item referenced by id without store"),
    (("of type 'reasoning' was provided without its required following item",),
     RetryAction.STRIP_BLOBS, "reasoning item separated from its output"),
    (("was provided without its required 'reasoning' item",), RetryAction.DROP_UNREASONED,
     "item id refers to a dropped reasoning item"),
    (("thought_signature", "missing"), RetryAction.SIGNATURE_STAND_INS,
     "Gemini thought signature missing"),
    (("thought signature",), RetryAction.STAND_IN, "Gemini thought signature rejected"),
    (("expected `thinking` or `redacted_thinking`",), RetryAction.RESTORE_LOOP_BLOBS,
     "Anthropic requires the loop's thinking blocks"),
    (("first block must be thinking or redacted_thinking",), RetryAction.RESTORE_LOOP_BLOBS,
     "Anthropic thinking blocks out of place"),
    (("when thinking is disabled",), RetryAction.STRIP_BLOBS,
     "thinking blocks sent with thinking disabled"),
    (("invalid `signature`",), RetryAction.STRIP_BLOBS, "thinking signature rejected"),
    (("invalid signature",), RetryAction.STRIP_BLOBS, "thinking signature rejected"),
    (("reasoning_content", "must be passed back"), RetryAction.REASONING_PLACEHOLDERS,
     "reasoning_content required in the tool loop"),
    (("missing `reasoning_content`",), RetryAction.REASONING_PLACEHOLDERS,
     "reasoning_content required in the tool loop"),
    (("reasoning_content is missing",), RetryAction.REASONING_PLACEHOLDERS,
     "reasoning_content required in the tool loop"),
    # OpenAI checks an assistant's content parts against its list of part types: a replayed
    # Anthropic thinking part, signed or not, is "Invalid value: 'thinking'" [OBS].
    (("invalid value: 'thinking'",), RetryAction.DROP_PLAIN_REASONING,
     "thinking parts not accepted"),
    (("invalid value: 'redacted_thinking'",), RetryAction.DROP_PLAIN_REASONING,
     "thinking parts not accepted"),
    # Legacy DeepSeek R1 [OBS]: "The reasoning_content is an intermediate result for display
    # purposes only ... Please remove the reasoning_content from your message ...".
    (("remove the reasoning_content",), RetryAction.DROP_PLAIN_REASONING,
     "reasoning_content not accepted"),
    (("unknown parameter", "reasoning_content"), RetryAction.DROP_PLAIN_REASONING,
     "reasoning_content not accepted"),
)


# The message fields clients replay that hold private reasoning state (PROTOCOL.md §4.1, §4.6,
# §4.7, §4.8): plain text, the lists, LiteLLM's bag of provider extras, and the holder of
# Gemini's thought signatures on a message or a tool call (a thread begun on Gemini's
# OpenAI-compatible endpoint and routed on). A strict upstream names the ones it rejects:
# OpenAI's schema check lists every unexpected key, one or several (§2.1), Cerebras names one
# field path (§4.1).
_PRIVATE_FIELDS = frozenset({"reasoning_content", "reasoning", "reasoning_details",
                             "thinking_blocks", "reasoning_items", "provider_specific_fields",
                             "extra_content"})
_UNEXPECTED = re.compile(r"additional properties are not allowed \((.*?) (?:was|were) unexpected\)")
_QUOTED = re.compile(r"'([^']*)'")
_UNSUPPORTED = re.compile(r"property '[^']*?\.([a-z_]+)' is unsupported")


def private_state_rejection(status: int, body: Any) -> Retry | None:
    """What one retry should do about rejected provider-private state, or None."""
    if status == 429 or 200 <= status < 300 and not _is_error_event(body):
        return None
    spelled = _error_strings(body, max(status, 400))
    texts = [t.lower() for t in spelled]
    for phrases, action, reason in _PRIVATE_RULES:
        if any(all(p in t for p in phrases) for t in texts):
            named = _named_item(spelled) if action in _NAMING else None
            return Retry(action, reason, () if named is None else (named,))
    if any(_rejects_only_private_fields(t) for t in texts):
        return Retry(RetryAction.DROP_PLAIN_REASONING, "reasoning fields not accepted")
    return None


# Refusals that name the item they are about: "Item 'ws_…' of type 'web_search_call' was
# provided without its required 'reasoning' item: 'rs_…'."
_NAMING = (RetryAction.DROP_UNREASONED,)
_ITEM_NAMED = re.compile(r"item '([^']+)' of type '[^']*' was provided without", re.IGNORECASE)


def _named_item(spelled: list[str]) -> str | None:
    """The item id as the refusal spells it (the rules read the text lower-cased)."""
    return next((found.group(1) for t in spelled if (found := _ITEM_NAMED.search(t))), None)


def _rejects_only_private_fields(text: str) -> bool:
    """Whether `text` rejects message fields that are all private reasoning state: stripping
    them can make the retry pass; an unexpected key of another kind would fail it again."""
    found = _UNEXPECTED.search(text)
    names = _QUOTED.findall(found.group(1)) if found else _UNSUPPORTED.findall(text)
    return bool(names) and all(name in _PRIVATE_FIELDS for name in names)


def _is_error_event(body: Any) -> bool:
    doc = _parsed(body)
    return isinstance(doc, dict) and (doc.get("type") in ("error", "response.failed")
                                      or bool(doc.get("error")))
