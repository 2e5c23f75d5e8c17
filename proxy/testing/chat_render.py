"""Chat Completions answers in OpenAI's exact shapes (PROTOCOL.md §1.2, §1.3), per dialect.

Non-streamed: one `chat.completion` object. Streamed: `chat.completion.chunk` objects: a role
chunk, reasoning and content pieces, tool-call headers and argument fragments interleaved across
indexes, the finish chunk, and the `choices: []` usage chunk when asked for. With `n` above 1,
each choice is a message (streamed: the choices' chunks interleave). Dialects decide where
reasoning goes: `reasoning_content` (DeepSeek, Kimi), `reasoning` + signed `reasoning_details`
(OpenRouter), `reasoning` (Cerebras, vLLM), a `thought_signature` on the first call (Gemini), nowhere
(OpenAI: hidden, only counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.testing.replies import Reply
from proxy.testing.signing import Signer
from proxy.testing.turn import Ids, Turn, split_json, split_text
from proxy.testing.usage import chat_usage

FINGERPRINT = "fp_fake00001"


def reasoning_fields(turn: Turn, signer: Signer) -> dict[str, Any]:
    text = turn.reply.reasoning
    if not text:
        return {}
    if turn.dialect in ("deepseek-thinking", "deepseek-r1-legacy", "kimi-thinking"):
        return {"reasoning_content": text}  # R1 returned it too, and refused it back
    if turn.dialect in ("cerebras", "vllm"):  # vLLM since PR #27752 (PROTOCOL.md §4.8)
        return {"reasoning": text}
    if turn.dialect == "openrouter":
        detail = {"type": "reasoning.text", "text": text, "format": "anthropic-claude-v1", "index": 0}
        return {"reasoning": text, "reasoning_details": [signer.sign_detail(detail)]}
    return {}


def wire_calls(turn: Turn, signer: Signer, ids: Ids) -> list[dict[str, Any]]:
    calls = []
    for k, (call, call_id) in enumerate(zip(turn.reply.calls, turn.call_ids, strict=True)):
        if call.custom:
            wire = {"id": call_id, "type": "custom", "custom": {"name": call.name, "input": call.arguments}}
        else:
            wire = {"id": call_id, "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments}}
        if turn.dialect == "gemini" and k == 0:
            wire["extra_content"] = {"google": {"thought_signature": signer.thought_signature(ids.bytes(12))}}
        calls.append(wire)
    return calls


# One choice of an answer as rendered: its turn, wire calls and reasoning fields.
Rendered = tuple[Turn, list[dict[str, Any]], dict[str, Any]]


def completion(turn: Turn, completion_id: str, calls: list[dict[str, Any]],
               reasoning: dict[str, Any], more: Sequence[Rendered] = ()) -> dict[str, Any]:
    """The answer; `more`: the choices after the first (a request's `n`)."""
    choices = [{"index": index, "message": _message(choice.reply, choice_calls, fields),
                "logprobs": None, "finish_reason": choice.reply.finish()}
               for index, (choice, choice_calls, fields)
               in enumerate([(turn, calls, reasoning), *more])]
    return {"id": completion_id, "object": "chat.completion", "created": turn.created,
            "model": turn.model, "choices": choices,
            "usage": chat_usage(turn.counts, turn.usage_style),
            "service_tier": "default", "system_fingerprint": FINGERPRINT}


def _message(reply: Reply, calls: list[dict[str, Any]],
             reasoning: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None,
                               "annotations": [], **reasoning}
    if calls:
        message["tool_calls"] = calls
    return message


def chunks(turn: Turn, completion_id: str, calls: list[dict[str, Any]],
           reasoning: dict[str, Any], ids: Ids, more: Sequence[Rendered] = ()) -> list[dict[str, Any]]:
    """The stream's chunks, one choice's delta each; with `more` (a request's `n`) the
    choices' deltas interleave, as upstream sends them, then each choice's finish."""
    rendered = [(turn, calls, reasoning), *more]
    streams = [_deltas(choice.reply, choice_calls, fields)
               for choice, choice_calls, fields in rendered]
    out = []
    for depth in range(max(len(stream) for stream in streams)):
        out += [_chunk(turn, completion_id, [_choice(stream[depth], None, index)], ids)
                for index, stream in enumerate(streams) if depth < len(stream)]
    out += [_chunk(turn, completion_id, [_choice({}, choice.reply.finish(), index)], ids)
            for index, (choice, _, _) in enumerate(rendered)]
    if turn.include_usage:
        out.append(_chunk(turn, completion_id, [], ids, chat_usage(turn.counts, turn.usage_style)))
    return out


def _deltas(reply: Reply, calls: list[dict[str, Any]],
            reasoning: dict[str, Any]) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "" if reply.content else None,
                                     "refusal": None}]
    deltas += _reasoning_deltas(reasoning)
    if reply.content:
        deltas += [{"content": piece} for piece in split_text(reply.content)]
    deltas += [{"tool_calls": [fragment]} for fragment in _call_fragments(calls)]
    return deltas


def _reasoning_deltas(reasoning: dict[str, Any]) -> list[dict[str, Any]]:
    key = "reasoning_content" if "reasoning_content" in reasoning else "reasoning"
    if key not in reasoning:
        return []
    deltas: list[dict[str, Any]] = [{key: piece} for piece in split_text(reasoning[key])]
    if "reasoning_details" in reasoning:
        deltas.append({"reasoning_details": reasoning["reasoning_details"]})
    return deltas


def _call_fragments(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per call a header then argument fragments; calls interleaved round-robin by index."""
    streams = []
    for index, call in enumerate(calls):
        if call["type"] == "custom":
            streams.append([{"index": index, **call}])
            continue
        header = {"index": index, "id": call["id"], "type": "function",
                  "function": {"name": call["function"]["name"], "arguments": ""}}
        if "extra_content" in call:
            header["extra_content"] = call["extra_content"]
        pieces = split_json(call["function"]["arguments"])
        streams.append([header] + [{"index": index, "function": {"arguments": p}} for p in pieces if p])
    out = []
    for depth in range(max((len(s) for s in streams), default=0)):
        out += [stream[depth] for stream in streams if depth < len(stream)]
    return out


def _choice(delta: dict[str, Any], finish: str | None, index: int = 0) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}


def _chunk(turn: Turn, completion_id: str, choices: list[dict[str, Any]], ids: Ids,
           usage: dict[str, Any] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": completion_id, "object": "chat.completion.chunk",
                             "created": turn.created, "model": turn.model, "service_tier": "default",
                             "system_fingerprint": FINGERPRINT, "choices": choices}
    if turn.include_usage:
        chunk["usage"] = usage
    if turn.obfuscate:
        chunk["obfuscation"] = ids.padding()
    return chunk
