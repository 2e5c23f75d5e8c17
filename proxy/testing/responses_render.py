"""Responses API answers (PROTOCOL.md §6): output items, the response object, the SSE events.

Output order: a reasoning item (when the reply reasons), then the assistant message, then the
calls. Items produced next to a reasoning item get ids that name it (see `signing`), and the
reasoning item's `encrypted_content` (only when `include` asks for it) is bound to the items
that preceded it, so the rules can later tell an exact echo from a changed history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.testing.overflow import responses_error
from proxy.testing.signing import Signer
from proxy.testing.turn import Ids, Turn, split_json, split_text
from proxy.testing.usage import responses_usage

Event = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class OutputOptions:
    include_encrypted: bool
    want_summary: bool


def options_of(body: Mapping[str, Any]) -> OutputOptions:
    include = body.get("include")
    encrypted = isinstance(include, list) and "reasoning.encrypted_content" in include
    return OutputOptions(encrypted, bool(_reasoning_options(body).get("summary")))


def _reasoning_options(body: Mapping[str, Any]) -> Mapping[str, Any]:
    reasoning = body.get("reasoning")
    return reasoning if isinstance(reasoning, Mapping) else {}


def output_items(turn: Turn, history: Sequence[Any], options: OutputOptions, signer: Signer,
                 ids: Ids) -> list[dict[str, Any]]:
    reply, nonce = turn.reply, ids.hex(24)
    reasoned = bool(reply.reasoning)
    items: list[dict[str, Any]] = []
    if reasoned:
        summary = [{"type": "summary_text", "text": reply.reasoning}] if options.want_summary else []
        item: dict[str, Any] = {"id": signer.reasoning_id(nonce), "type": "reasoning", "summary": summary}
        if options.include_encrypted:
            item["encrypted_content"] = signer.encrypted_content(history, ids.bytes(16))
        items.append(item)
    cut = reply.finish_reason == "length"
    # A model stopped inside its reasoning wrote no message (the output is the reasoning item).
    if reply.content is not None or not (reply.calls or (cut and reasoned)):
        items.append({"id": signer.item_id("msg", nonce, len(items), reasoned=reasoned),
                      "type": "message", "status": "completed", "role": "assistant",
                      "content": [_text_part(reply.content or "")]})
    for call, call_id in zip(reply.calls, turn.call_ids, strict=True):
        prefix = "ctc" if call.custom else "fc"
        item = {"id": signer.item_id(prefix, nonce, len(items), reasoned=reasoned),
                "type": "custom_tool_call" if call.custom else "function_call", "status": "completed",
                "call_id": call_id, "name": call.name}
        item["input" if call.custom else "arguments"] = call.arguments
        items.append(item)
    if cut and items[-1]["type"] != "reasoning":
        items[-1]["status"] = "incomplete"  # where the output tokens ran out
    return items


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def response_object(turn: Turn, body: Mapping[str, Any], response_id: str,
                    output: list[dict[str, Any]], *, final: bool = True) -> dict[str, Any]:
    cut = turn.reply.finish_reason == "length"
    status = ("incomplete" if cut else "completed") if final else "in_progress"
    reasoning = _reasoning_options(body)
    return {
        "id": response_id, "object": "response", "created_at": turn.created, "status": status,
        "background": body.get("background") is True, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut and final else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": turn.model, "output": output if final else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "store": body.get("store", True), "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []), "top_p": body.get("top_p", 1.0), "truncation": body.get("truncation") or "disabled",
        "usage": responses_usage(turn.counts) if final else None, "user": None,
        "metadata": body.get("metadata") or {},
        "conversation": _conversation(body),
    }


def _conversation(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The conversation the response was added to, as `{"id": ...}` [SRC openai-python
    `Response.conversation`]; the request may name it by id or as that object."""
    named = body.get("conversation")
    named = named.get("id") if isinstance(named, Mapping) else named
    return {"id": named} if isinstance(named, str) else None


def events(turn: Turn, body: Mapping[str, Any], response_id: str, output: list[dict[str, Any]],
           ids: Ids) -> list[Event]:
    started = response_object(turn, body, response_id, output, final=False)
    out: list[Event] = [("response.created", {"response": started}),
                        ("response.in_progress", {"response": started})]
    for index, item in enumerate(output):
        out += _item_events(index, item, turn.obfuscate, ids)
    final = response_object(turn, body, response_id, output)
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    out.append((terminal, {"response": final}))
    return _numbered(out)


def overflow_events(turn: Turn, body: Mapping[str, Any], response_id: str) -> list[Event]:
    """An overflow reported inside the stream, as observed from OpenAI [OBS]."""
    started = response_object(turn, body, response_id, [], final=False)
    return _numbered([("response.created", {"response": started}),
                      ("response.in_progress", {"response": started}),
                      ("error", {"error": responses_error()})])


def _numbered(events_: list[Event]) -> list[Event]:
    return [(kind, {"type": kind, "sequence_number": n, **data}) for n, (kind, data) in enumerate(events_)]


def _item_events(index: int, item: dict[str, Any], obfuscate: bool, ids: Ids) -> list[Event]:
    where = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    if kind == "reasoning":
        added = {"id": item["id"], "type": "reasoning", "summary": []}
        middle = _summary_events(where, item["summary"])
    elif kind == "message":
        added = {**item, "status": "in_progress", "content": []}
        middle = _text_events(where, item["content"][0], obfuscate, ids)
    elif kind == "function_call":
        added = {**item, "status": "in_progress", "arguments": ""}
        middle = _delta_events("response.function_call_arguments", where, item["arguments"],
                               {"name": item["name"], "arguments": item["arguments"]}, obfuscate, ids)
    else:
        added = {**item, "status": "in_progress", "input": ""}
        middle = _delta_events("response.custom_tool_call_input", where, item["input"],
                               {"input": item["input"]}, obfuscate, ids)
    return [("response.output_item.added", {"output_index": index, "item": added}), *middle,
            ("response.output_item.done", {"output_index": index, "item": item})]


def _summary_events(where: dict[str, Any], summary: list[dict[str, Any]]) -> list[Event]:
    out: list[Event] = []
    for n, part in enumerate(summary):
        at = {**where, "summary_index": n}
        out.append(("response.reasoning_summary_part.added",
                    {**at, "part": {"type": "summary_text", "text": ""}}))
        out += [("response.reasoning_summary_text.delta", {**at, "delta": piece})
                for piece in split_text(part["text"])]
        out.append(("response.reasoning_summary_text.done", {**at, "text": part["text"]}))
        out.append(("response.reasoning_summary_part.done", {**at, "part": part}))
    return out


def _text_events(where: dict[str, Any], part: dict[str, Any], obfuscate: bool, ids: Ids) -> list[Event]:
    at = {**where, "content_index": 0}
    out: list[Event] = [("response.content_part.added", {**at, "part": _text_part("")})]
    for piece in split_text(part["text"]):
        delta = {**at, "delta": piece, "logprobs": []}
        if obfuscate:
            delta["obfuscation"] = ids.padding()
        out.append(("response.output_text.delta", delta))
    out.append(("response.output_text.done", {**at, "text": part["text"], "logprobs": []}))
    out.append(("response.content_part.done", {**at, "part": part}))
    return out


def _delta_events(prefix: str, where: dict[str, Any], text: str, done: dict[str, Any],
                  obfuscate: bool, ids: Ids) -> list[Event]:
    out: list[Event] = []
    for piece in split_json(text):
        delta = {**where, "delta": piece}
        if obfuscate:
            delta["obfuscation"] = ids.padding()
        out.append((f"{prefix}.delta", delta))
    out.append((f"{prefix}.done", {**where, **done}))
    return out
