"""Factories for wire messages (chat) and input items (Responses), and their `Entry` form.

`chat(...)` / `responses(...)` build entries the way the proxy does, with client bytes in a
style orjson never produces (spaces, escaped non-ASCII), so any re-serialization of an
untouched entry shows up as a byte difference.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.conversation import Api, Entries, Entry, entries_from
from proxy.testing.reference_tokens import chat_message_tokens, responses_item_tokens

Message = dict[str, Any]


def client_bytes(element: Any) -> bytes:
    return json.dumps(element).encode()


def chat(*messages: Message) -> Entries:
    return entries_from(Api.CHAT, list(messages), [client_bytes(m) for m in messages])


def responses(*items: Message) -> Entries:
    return entries_from(Api.RESPONSES, list(items), [client_bytes(i) for i in items])


def entries_of(api: str, elements: list[Message]) -> Entries:
    return chat(*elements) if api == "chat" else responses(*elements)


def wire(entries: Entries) -> list[Any]:
    """The JSON list the entries stand for (what goes upstream)."""
    return [json.loads(e.to_bytes()) for e in entries]


def measure(entry: Entry) -> int:
    """Tokens of one entry, by the fake upstream's own count."""
    if entry.api is Api.CHAT:
        return chat_message_tokens(entry.raw)
    return responses_item_tokens(entry.raw)


# ---------------------------------------------------------------- chat

def system(text: str = "You are a careful coding agent.") -> Message:
    return {"role": "system", "content": text}


def developer(text: str = "Prefer small diffs.") -> Message:
    return {"role": "developer", "content": text}


def user(text: str = "Please fix the failing test.", **extra: Any) -> Message:
    return {"role": "user", "content": text, **extra}


def assistant(text: str = "Done.", **extra: Any) -> Message:
    return {"role": "assistant", "content": text, **extra}


def call(name: str, id: str, arguments: dict[str, Any] | str | None = None, **extra: Any) -> Message:
    """One entry of an assistant message's `tool_calls`."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": id, "type": "function", "function": {"name": name, "arguments": args}, **extra}


def custom_call(name: str, id: str, input: str) -> Message:
    return {"id": id, "type": "custom", "custom": {"name": name, "input": input}}


def assistant_calls(*calls: Message, content: Any = None, **extra: Any) -> Message:
    return {"role": "assistant", "content": content, "tool_calls": list(calls), **extra}


def tool_result(call_id: str, content: Any = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def read(id: str, path: str = "src/app.py", start: int | None = None, end: int | None = None) -> Message:
    args: dict[str, Any] = {"path": path}
    if start is not None:
        args.update(start_line=start, end_line=end)
    return call("read_file", id, args)


# ---------------------------------------------------------------- Responses

def r_message(role: str, text: str, **extra: Any) -> Message:
    part = "output_text" if role == "assistant" else "input_text"
    body: Message = {"type": part, "text": text}
    if part == "output_text":
        body["annotations"] = []
    return {"type": "message", "role": role, "content": [body], **extra}


def r_user(text: str = "Please fix the failing test.") -> Message:
    return r_message("user", text)


def r_developer(text: str = "You are a careful coding agent.") -> Message:
    return r_message("developer", text)


def r_assistant(text: str = "Done.", **extra: Any) -> Message:
    return r_message("assistant", text, **extra)


def r_call(name: str, call_id: str, arguments: dict[str, Any] | str | None = None, **extra: Any) -> Message:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": args, **extra}


def r_custom_call(name: str, call_id: str, input: str) -> Message:
    return {"type": "custom_tool_call", "call_id": call_id, "name": name, "input": input}


def r_output(call_id: str, output: Any = "ok", custom: bool = False) -> Message:
    type_ = "custom_tool_call_output" if custom else "function_call_output"
    return {"type": type_, "call_id": call_id, "output": output}


def r_reasoning(id: str, encrypted: str | None = "gAAAAABblob", summary: str | None = None) -> Message:
    item: Message = {"type": "reasoning", "id": id,
                     "summary": [{"type": "summary_text", "text": summary}] if summary else []}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def r_compaction(blob: str = "gAAAAABcompacted") -> Message:
    return {"type": "compaction", "encrypted_content": blob}


def stage_context(entries: Entries, tail: int = 0, **fields: Any) -> Any:
    """A `StageContext` protecting the last `tail` entries, with default settings."""
    from proxy.core.stage import StageContext
    from proxy.core.window import window_of
    from proxy.settings import CompactionSettings

    defaults: dict[str, Any] = {"settings": CompactionSettings(), "window": window_of(entries, tail),
                                "origins": tuple(range(len(entries))), "measure": measure}
    return StageContext(**{**defaults, **fields})


def without_gemini_signature(holder: Any) -> Any:
    """`holder` (a message or a tool call) without `extra_content.google.thought_signature`
    (or its stand-in), and without the dicts that held nothing else."""
    if not isinstance(holder, dict):
        return holder
    extra = holder.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    if not isinstance(google, dict) or "thought_signature" not in google:
        return holder
    rest = {k: v for k, v in google.items() if k != "thought_signature"}
    outer = {k: v for k, v in extra.items() if k != "google"} | ({"google": rest} if rest else {})
    return {k: v for k, v in holder.items() if k != "extra_content"} | (
        {"extra_content": outer} if outer else {})
