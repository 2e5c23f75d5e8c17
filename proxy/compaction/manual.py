"""Manual `/compact [focus]` (SPEC §8): the command, its synthetic answer, and their exclusion.

The command is the latest entry, a user message whose text is the configured command, alone or
followed by whitespace and focus instructions. The answer is the proxy's own: it never reaches
a model, and is given in the exact OpenAI shapes (chat JSON, chat SSE, Responses JSON, Responses
SSE). Ids and times come in as arguments; `synthetic_ids` derives them from a seed.

Exclusion. Next turn the client sends the command and our answer back; they are shown to the
user but are not model context, so `strip_exchanges` removes every command message and the
assistant message right after it when that message begins with `MARKER` (or is a reference to
our answer's id: `is_our_answer`). Recognition is by the marker plus adjacency, not by a stored
digest: it needs no state, so it survives restarts, later checkpoints replacing the manual one,
and both APIs alike (clients re-serialize and may drop ids, but they echo visible text). A user
cannot forge it without also sending the command right before it, and an assistant answer right
after a command exists only when the proxy answered it. Run it on the raw list before
everything else, filtering the ids in step, so every index (the checkpoint's `cutoff_index`
included) refers to the command-free list.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import Any

import orjson

from proxy.conversation import USER, Entries, Entry, Kind, content_text, reference_id
from proxy.core.memo import memoized, memoized_each

MARKER = "[context compaction]"


@dataclass(frozen=True)
class ManualCommand:
    focus: str | None  # the instructions after the command, if any


def parse_command(text: str, command: str) -> ManualCommand | None:
    stripped = text.strip()
    if stripped == command:
        return ManualCommand(None)
    if stripped.startswith(command) and stripped[len(command)].isspace():
        return ManualCommand(stripped[len(command):].strip() or None)
    return None


def is_command(text: object, command: str) -> bool:
    """Whether `text` (a string input, say) is the command, with focus or not."""
    return isinstance(text, str) and parse_command(text, command) is not None


def detect(entries: Sequence[Entry], command: str) -> ManualCommand | None:
    """The command when the latest entry is one (a command followed by anything is history)."""
    if not entries or entries[-1].kind is not USER:
        return None
    if not mentions(entries[-1], command):
        return None  # what `parse_command` accepts starts with the command, after whitespace
    return parse_command(content_text(entries[-1]), command)


def mentions(entry: Entry, command: str) -> bool:
    """Whether the entry's text starts with `command` (after whitespace): a command, or text
    that merely begins like one. Kept on the entry: asked of every user message, every request."""
    return memoized(entry, ("manual.mentions", command), partial(_starts_with, command=command))


def mentioned(entries: Sequence[Entry], command: str) -> bool:
    """Whether some user message `mentions` the command. The answers kept on the entries are
    read in C: a long thread has dozens of user messages, asked again on every request."""
    key = ("manual.mentions", command)
    users = list(compress(entries, map(is_, map(_KIND, entries), repeat(USER))))
    # Kept answers are bools, a message not asked yet reads None: `in` finds it in C. Only
    # then is the test made and each new message asked (`memoized_each`, as `mentions` keeps).
    known = list(map(dict.get, map(_MEMO, users), repeat(key)))
    if None in known:
        known = memoized_each(users, key, partial(_starts_with, command=command))
    return any(known)


def _starts_with(entry: Entry, command: str) -> bool:
    return content_text(entry).lstrip().startswith(command)


_KIND = attrgetter("kind")
_MEMO = attrgetter("memo")


def is_our_answer(entry: Entry) -> bool:
    """Our answer echoed whole, or (a Responses client with `store` on) by an `item_reference`
    to its message's id, which upstream never held: sent on, it would be refused every turn."""
    if entry.kind is Kind.ASSISTANT:
        return content_text(entry).lstrip().startswith(MARKER)
    named = reference_id(entry)
    return named is not None and _OUR_MESSAGE_ID.fullmatch(named) is not None


def strip_exchanges(entries: Sequence[Entry], ids: Sequence[str],
                    command: str) -> tuple[Entries, list[str]]:
    """The entries and ids without command messages and the proxy's answers to them."""
    drop: set[int] = set()
    for i, entry in enumerate(entries):
        if entry.kind is USER and parse_command(content_text(entry), command) is not None:
            drop.add(i)
            if i + 1 < len(entries) and is_our_answer(entries[i + 1]):
                drop.add(i + 1)
    if not drop:
        return tuple(entries), list(ids)
    keep = [i for i in range(len(entries)) if i not in drop]
    return tuple(entries[i] for i in keep), [ids[i] for i in keep]


# ---------------------------------------------------------------- the answer's text

def compacted_text(summarized: int, kept: int, tokens_before: int, tokens_after: int) -> str:
    kept_part = (f" The latest {kept} message(s) are kept as they were."
                 if kept else " Nothing else is kept verbatim.")
    return (f"{MARKER} Compacted {summarized} earlier message(s) into a summary: the context "
            f"went from about {tokens_before:,} to {tokens_after:,} tokens.{kept_part} "
            "Your next message continues from the compacted context.")


def nothing_text(tokens: int, *, compacted_before: bool = True) -> str:
    if not compacted_before:  # no cut leaves anything outside the tail kept verbatim
        return (f"{MARKER} Nothing to compact yet: the conversation is short enough to be kept "
                f"verbatim as its recent messages (about {tokens:,} tokens now).")
    return (f"{MARKER} Nothing new to compact: the conversation has not grown enough since the "
            f"last compaction (about {tokens:,} tokens now).")


def lone_command_text() -> str:
    return (f"{MARKER} Nothing to compact: this request holds the command alone, with no "
            "conversation before it.")


def no_thread_text(headers: tuple[str, ...]) -> str:
    named = " or ".join(f"`{h}`" for h in headers) or "a thread header"
    return (f"{MARKER} Nothing was compacted: this request names no thread, so the proxy keeps "
            f"no state for it. Send a thread id ({named}) with every request of the "
            "conversation to compact it.")


def unchanged_text(reason: str, tokens: int) -> str:
    return (f"{MARKER} Nothing was compacted: {reason}. The conversation is unchanged and "
            f"still below the compaction trigger (about {tokens:,} tokens now).")


# ---------------------------------------------------------------- ids

@dataclass(frozen=True)
class SyntheticIds:
    completion: str
    response: str
    message: str


# `synthetic_ids`' message id: the proxy's own scheme, no upstream's.
_OUR_MESSAGE_ID = re.compile(r"msg_compact[0-9a-f]{24}")


def synthetic_ids(seed: str) -> SyntheticIds:
    digest = hashlib.blake2b(seed.encode(), digest_size=12).hexdigest()
    return SyntheticIds(f"chatcmpl-compact{digest}", f"resp_compact{digest}",
                        f"msg_compact{digest}")


_ZERO_CHAT_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


# ---------------------------------------------------------------- chat completions

def chat_completion(text: str, *, model: str, created: int, completion_id: str,
                    choices: int = 1) -> dict[str, Any]:
    """`choices`: as many as the request's `n` asked, each the same answer."""
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": index, "message": {"role": "assistant", "content": text,
                                                     "refusal": None},
                         "logprobs": None, "finish_reason": "stop"} for index in range(choices)],
            "usage": dict(_ZERO_CHAT_USAGE)}


def chat_stream(text: str, *, model: str, created: int, completion_id: str,
                include_usage: bool, choices: int = 1) -> bytes:
    """The SSE body: role, content, finish (each for every choice in turn, as OpenAI interleaves
    `n` choices); the usage chunk only when the client asked."""
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": ""}, None), ({"content": text}, None), ({}, "stop")]
    chunks = []
    for delta, finish in deltas:
        for index in range(choices):
            chunk: dict[str, Any] = {
                "id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": index, "delta": delta, "logprobs": None,
                                             "finish_reason": finish}]}
            if include_usage:
                chunk["usage"] = None
            chunks.append(chunk)
    if include_usage:
        chunks.append({"id": completion_id, "object": "chat.completion.chunk",
                       "created": created, "model": model, "choices": [],
                       "usage": dict(_ZERO_CHAT_USAGE)})
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


# OpenAI's range for `n`; the command's answer is the proxy's, so a value outside it (which the
# model's upstream would refuse) gets the one answer rather than an error about a model call
# that is never made.
_MAX_CHOICES = 128


def choice_count(doc: Mapping[str, Any]) -> int:
    """How many choices a chat request's `n` asks for: 1 unless an integer in OpenAI's range."""
    n = doc.get("n")
    return n if type(n) is int and 1 <= n <= _MAX_CHOICES else 1


def include_usage(doc: Mapping[str, Any]) -> bool:
    options = doc.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


# ---------------------------------------------------------------- Responses

def response_object(text: str, *, model: str, created: int, ids: SyntheticIds,
                    doc: Mapping[str, Any] | None = None, completed: bool = True) -> dict[str, Any]:
    doc = doc or {}
    return {
        "id": ids.response, "object": "response", "created_at": created, "model": model,
        "status": "completed" if completed else "in_progress",
        "error": None, "incomplete_details": None,
        "instructions": _string_or_none(doc.get("instructions")),
        "metadata": doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {},
        "output": [_output_message(text, ids.message)] if completed else [],
        "parallel_tool_calls": doc.get("parallel_tool_calls") is not False,
        "tool_choice": "auto", "tools": [], "temperature": None, "top_p": None,
        "text": {"format": {"type": "text"}},
        "usage": _responses_usage() if completed else None,
    }


def _string_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _output_message(text: str, message_id: str, done: bool = True) -> dict[str, Any]:
    return {"id": message_id, "type": "message", "role": "assistant",
            "status": "completed" if done else "in_progress",
            "content": [_text_part(text)] if done else []}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _responses_usage() -> dict[str, Any]:
    return {"input_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0}


def response_events(text: str, *, model: str, created: int, ids: SyntheticIds,
                    doc: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The stream's events in order, numbered from 0."""
    pending = response_object(text, model=model, created=created, ids=ids, doc=doc,
                              completed=False)
    where = {"item_id": ids.message, "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
        {"type": "response.output_item.added", "output_index": 0,
         "item": _output_message(text, ids.message, done=False)},
        {"type": "response.content_part.added", **where, "part": _text_part("")},
        {"type": "response.output_text.delta", **where, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": _text_part(text)},
        {"type": "response.output_item.done", "output_index": 0,
         "item": _output_message(text, ids.message)},
        {"type": "response.completed",
         "response": response_object(text, model=model, created=created, ids=ids, doc=doc)},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def response_stream(text: str, *, model: str, created: int, ids: SyntheticIds,
                    doc: Mapping[str, Any] | None = None) -> bytes:
    events = response_events(text, model=model, created=created, ids=ids, doc=doc)
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
                    for e in events)
