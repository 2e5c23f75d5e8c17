"""Replaying a recorded chat conversation as a client would, and checking what reached upstream.

Used by `bench_compaction.py --traces`. A recorded conversation is replayed turn by turn: before
each assistant message the client sends its history so far, the fake model is scripted to give
that recorded message back, and the client appends the answer it actually received (as a real
client does: with whatever reasoning fields or signatures the dialect added). The history can be
sent as Chat Completions `messages` or converted to Responses `input` items, streamed or not.

The checks read the main (non-summarizer) request the fake upstream received for each turn and
compare it with what the client sent (SPEC §4, §5): leading system messages, the latest user
message and the protected tail reach upstream unchanged (provider-private state aside, which a
compacted projection may drop or stand in for: SPEC §7.2), every tool call has its results right
after it (chat) or somewhere after it (Responses), no result lacks its call, and the reference
token count stays within the fake's window.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.testing.chat_render import completion, reasoning_fields, wire_calls
from proxy.testing.fake_upstream import FakeUpstream, Recorded
from proxy.testing.prompt_units import PromptUnits, prompt_tokens
from proxy.testing.replies import Reply


@dataclass(frozen=True)
class ClientMode:
    api: str = "chat"  # chat | responses
    stream: str = "off"  # off | usage (stream_options.include_usage) | plain
    model: str = "bench-model"


@dataclass
class Sent:
    """One client turn: what the client sent, what it got, and what upstream received."""

    history: list[dict[str, Any]]
    status: int
    error: str | None = None
    answer: list[dict[str, Any]] = field(default_factory=list)
    saw_usage: bool = False


# ---------------------------------------------------------------- chat -> Responses

def responses_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Chat `{"type": "function", "function": {...}}` tools as Responses' flat function tools."""
    if not tools:
        return None
    out = []
    for tool in tools:
        function = tool.get("function") or {}
        flat = {"type": "function", "name": function.get("name")}
        for key in ("description", "parameters", "strict"):
            if key in function:
                flat[key] = function[key]
        out.append(flat)
    return out


def responses_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One chat message as the Responses input items a client would send for it."""
    role, content = message["role"], message.get("content")
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message["tool_call_id"],
                 "output": _text(content)}]
    if role in ("system", "developer", "user"):
        return [{"type": "message", "role": role,
                 "content": [{"type": "input_text", "text": _text(content)}]}]
    items: list[dict[str, Any]] = []
    if _text(content):
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": _text(content)}]})
    for call in message.get("tool_calls") or ():
        items.append({"type": "function_call", "call_id": call["id"],
                      "name": call["function"]["name"], "arguments": call["function"]["arguments"]})
    return items


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return content or ""


# ---------------------------------------------------------------- the client side

def post_turn(client: httpx.Client, base_url: str, thread: str, history: list[dict[str, Any]],
              tools: Any, mode: ClientMode) -> Sent:
    body: dict[str, Any] = {"model": mode.model}
    if mode.api == "chat":
        body["messages"] = history
        if tools:
            body["tools"] = tools
    else:
        body["input"] = history
        if tools:
            body["tools"] = responses_tools(tools)
    if mode.stream != "off":
        body["stream"] = True
        if mode.stream == "usage" and mode.api == "chat":
            body["stream_options"] = {"include_usage": True}
    path = "/chat/completions" if mode.api == "chat" else "/responses"
    answer = client.post(base_url + path, json=body, headers={"x-thread-id": thread})
    sent = Sent(list(history), answer.status_code)
    if answer.status_code != 200:
        sent.error = answer.text[:300]
        return sent
    if mode.stream == "off":
        payload = answer.json()
        sent.answer = _answer_items(payload, mode.api)
        sent.saw_usage = payload.get("usage") is not None
        return sent
    frames = list(_sse_data(answer.text))
    if mode.api == "chat":
        _chat_stream(frames, sent)
    else:
        _responses_stream(frames, sent)
    return sent


def unreceived_answer(fake: FakeUpstream, message: Mapping[str, Any],
                      mode: ClientMode) -> list[dict[str, Any]]:
    """The recorded assistant `message` as the fake model would have answered it, for a turn
    whose request failed: the replay goes on with what a client that got the answer would hold.
    In chat that is the dialect's rendering (its reasoning fields, signatures): the bare
    recorded message lacks what the dialect issues with every answer (OpenRouter's signed
    `reasoning_details`, Gemini's `thought_signature`, DeepSeek's `reasoning_content`), so the
    next turns would be refused for a message no real model ever sent."""
    if mode.api != "chat":
        return responses_items(message)
    fake.script(Reply.repeating(message))
    body = {"model": mode.model, "messages": []}
    # Not a request: nothing is recorded, no summarizer answers, the window is not checked.
    reply = fake.next_reply(Recorded("POST", "/v1/chat/completions", {}, {}, b"", body))
    turn = fake.turn(body, reply, 0, [])
    payload = completion(turn, "chatcmpl-unreceived", wire_calls(turn, fake.signer, fake.ids),
                         reasoning_fields(turn, fake.signer))
    return _answer_items(payload, "chat")


def _answer_items(payload: Mapping[str, Any], api: str) -> list[dict[str, Any]]:
    if api == "chat":
        message = dict(payload["choices"][0]["message"])
        return [{k: v for k, v in message.items() if k not in ("refusal", "annotations")}]
    return list(payload["output"])


def _sse_data(text: str) -> Iterator[Any]:
    for line in text.splitlines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                yield orjson.loads(data)


def _chat_stream(frames: list[Any], sent: Sent) -> None:
    """Assemble the streamed message the way the official SDK's accumulator does."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    for frame in frames:
        if "error" in frame:
            sent.error = orjson.dumps(frame["error"]).decode()[:300]
        if frame.get("usage"):
            sent.saw_usage = True
        for choice in frame.get("choices") or ():
            delta = choice.get("delta") or {}
            for key in ("content", "reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    message[key] = (message.get(key) or "") + delta[key]
            if delta.get("reasoning_details"):
                message["reasoning_details"] = delta["reasoning_details"]
            for fragment in delta.get("tool_calls") or ():
                call = calls.setdefault(fragment["index"], {"function": {"arguments": ""}})
                for key in ("id", "type", "extra_content"):
                    if key in fragment:
                        call[key] = fragment[key]
                function = fragment.get("function") or {}
                if "name" in function:
                    call["function"]["name"] = function["name"]
                call["function"]["arguments"] += function.get("arguments") or ""
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    sent.answer = [message]


def _responses_stream(frames: list[Any], sent: Sent) -> None:
    for frame in frames:
        if frame.get("type") in ("error", "response.failed"):
            sent.error = orjson.dumps(frame).decode()[:300]
        if frame.get("type") == "response.completed":
            sent.answer = list(frame["response"]["output"])
            sent.saw_usage = frame["response"].get("usage") is not None


# ---------------------------------------------------------------- the checks

def role_of(entry: Mapping[str, Any]) -> str | None:
    role = entry.get("role")
    return role if isinstance(role, str) else None


def leading_system(entries: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    while n < len(entries) and role_of(entries[n]) in ("system", "developer"):
        n += 1
    return n


def common_suffix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def pairing_problem(entries: Sequence[Mapping[str, Any]], api: str) -> str | None:
    if api == "chat":
        return _chat_pairing(entries)
    calls = {e.get("call_id") for e in entries if e.get("type") == "function_call"}
    outputs = [e.get("call_id") for e in entries if e.get("type") == "function_call_output"]
    if set(outputs) - calls:
        return f"orphan function_call_output {sorted(set(outputs) - calls)[:3]}"
    if calls - set(outputs):
        return f"function_call without output {sorted(calls - set(outputs))[:3]}"
    return None


def _chat_pairing(messages: Sequence[Mapping[str, Any]]) -> str | None:
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.get("role") == "tool":
            return f"tool result at {i} without its call right before it"
        ids = [c.get("id") for c in message.get("tool_calls") or ()]
        results = []
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            results.append(messages[j].get("tool_call_id"))
            j += 1
        if sorted(results) != sorted(ids):
            return f"assistant at {i}: calls {ids} answered by {results}"
        i = j
    return None


def _carried(message: Mapping[str, Any], received: Sequence[Mapping[str, Any]]) -> bool:
    """The message reached upstream as it was, or word for word inside a restore message after a
    compaction summarized it (SPEC §5: the latest user message is always carried verbatim)."""
    if message in received:
        return True
    text = _text(message.get("content"))
    return any(text in _text(entry.get("content")) for entry in received
               if entry is not message and role_of(entry) == "user")


# Provider-private state the sanitizer may drop or stand in for in a compacted projection, also
# in the kept tail (SPEC §7.2: Gemini's signature becomes its documented stand-in).
_PRIVATE_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
                 "encrypted_content")


def visible(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """An entry without provider-private state: what the sanitizer never touches (SPEC §7)."""
    if entry.get("type") == "reasoning":
        return {"type": "reasoning"}
    out = {k: v for k, v in entry.items() if k not in _PRIVATE_KEYS}
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [{k: v for k, v in call.items() if k != "extra_content"}
                             for call in out["tool_calls"] if isinstance(call, Mapping)]
    return out


def _same_visible(received: Sequence[Mapping[str, Any]], tail: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `received` ends with the client's `tail` but for provider-private state.
    Responses reasoning items are left out on both sides: a compacted projection drops them
    (SPEC §7.2), and with them the server `id` of the items that referred to them (PROTOCOL.md
    §2.3 rule 3: an `fc_…`/`msg_…` id without its reasoning item is refused), so an item that
    reached upstream without its `id` lost it there; any other change of an id is a change."""
    def shown(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [e for e in entries if e.get("type") != "reasoning"]

    sent, got = shown(tail), shown(received)
    if len(got) < len(sent):
        return False
    for item, was in zip(got[len(got) - len(sent):], sent, strict=True):
        expected = dict(visible(was))
        if "type" in was and "id" not in item:
            expected.pop("id", None)
        if visible(item) != expected:
            return False
    return True


def check_turn(sent: Sent, upstream: Mapping[str, Any], line: Mapping[str, Any], api: str,
               window: int, units: PromptUnits) -> list[str]:
    """What is wrong with what reached upstream for this turn (empty: nothing)."""
    client = sent.history
    received = upstream["messages"] if api == "chat" else upstream["input"]
    problems = []
    lead = leading_system(client)
    if received[:lead] != client[:lead]:
        problems.append("leading system messages changed")
    users = [m for m in client if role_of(m) == "user"]
    if users and not _carried(users[-1], received):
        problems.append("latest user message changed or missing")
    protected = int(line.get("protected") or 0)
    if protected and not _same_visible(received, client[len(client) - protected:]):
        problems.append(f"protected tail of {protected} changed")
    found = pairing_problem(received, api)
    if found:
        problems.append(found)
    tokens = prompt_tokens(units.chat(upstream) if api == "chat" else units.responses(upstream, []))
    if tokens > window:
        problems.append(f"request of {tokens} tokens over the window {window}")
    return problems
