"""Sessions in the request shapes of real agent clients, and what every upstream request of
them must still be (SPEC §4, §5, §11).

The shapes, from LiteLLM's message types (PROTOCOL.md §4.7) and the clients as remembered
[MEM: where each client puts its markers and names is not from a recorded trace]:
- LiteLLM-fronted agents (OpenHands, Cline): content as part lists with Anthropic-style
  `cache_control` markers that move to the newest user messages (and tool results) each turn,
  `name` on messages, assistant `content: null` beside `tool_calls`, `reasoning_content`,
  signed `thinking_blocks` and `provider_specific_fields`, tool results as part lists;
- the legacy `functions` / `function_call` form with `role: "function"` results.
Aider: `aider_shapes`; Codex on the Responses API: `codex_shapes`.

`replay` sends a session prefix by prefix as the client would, the fake upstream answering each
turn with the session's next assistant message; `send_turns` posts bodies a client rebuilt.
`chat_anomalies` lists what is wrong with one upstream request against the client's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.jsonspan import locate_array
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from proxy.testing.rules import check_chat
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY

Wire = dict[str, Any]
EPHEMERAL = {"type": "ephemeral"}
# Not a fault: a summarized latest user message comes back verbatim after the summary (SPEC §5).
RESTORED = "latest user message restored (it was summarized)"
# Provider-private reasoning fields: the sanitizer's business (SPEC §7), not transparency's.
PRIVATE = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
           "reasoning_items", "provider_specific_fields")


def _text_parts(text: str) -> list[Wire]:
    return [{"type": "text", "text": text}]


def litellm_session(n: int, seed: int = 11) -> list[Wire]:
    """A coding session as a LiteLLM-fronted agent sends it (before the moving markers)."""
    out: list[Wire] = []
    for i, m in enumerate(coding_session(n, seed=seed)):
        role = m["role"]
        if role == "system":
            out.append({"role": "system", "content": [{"type": "text", "text": m["content"],
                                                       "cache_control": EPHEMERAL}]})
        elif role == "user":
            out.append({"role": "user", "content": _text_parts(m["content"]), "name": "dev"})
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"],
                        "content": _text_parts(m["content"])})
        elif m.get("tool_calls"):
            out.append({"role": "assistant", "content": m["content"], "tool_calls": m["tool_calls"],
                        "reasoning_content": f"step {i}: decide which tool to call",
                        "thinking_blocks": [{"type": "thinking", "thinking": f"step {i} thoughts",
                                             "signature": f"sig-{i:04d}"}],
                        "provider_specific_fields": {"citations": None}})
        else:
            out.append({"role": "assistant", "content": m["content"], "name": "agent"})
    return out


def with_moving_markers(messages: Sequence[Wire], roles: tuple[str, ...] = ("user",)) -> list[Wire]:
    """Cline's Anthropic caching through OpenAI format: the last part of the last two user
    messages carries `cache_control`; older user messages lose it as the thread grows.
    OpenHands marks its newest tool results the same way (`roles`)."""
    users = [i for i, m in enumerate(messages) if m["role"] in roles][-2:]
    out = list(messages)
    for i in users:
        parts = [dict(p) for p in out[i]["content"]]
        parts[-1]["cache_control"] = EPHEMERAL
        out[i] = {**out[i], "content": parts}
    return out


def legacy_functions_session(n: int, seed: int = 12) -> list[Wire]:
    """The deprecated single-call form: `function_call` on the assistant, `role: "function"`
    results named by the function; parallel calls become consecutive single calls."""
    out: list[Wire] = []
    pending: list[Wire] = []  # the calls of the latest assistant step not yet answered
    for m in coding_session(n, seed=seed):
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = [c["function"] for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": m["content"], "function_call": pending[0]})
        elif m["role"] == "tool":
            done = pending.pop(0)
            out.append({"role": "function", "name": done["name"], "content": m["content"]})
            if pending:
                out.append({"role": "assistant", "content": None, "function_call": pending[0]})
        else:
            out.append(m)
    return out


FUNCTIONS = [{"name": name, "description": f"{name} tool",
              "parameters": {"type": "object", "properties": {}, "additionalProperties": True}}
             for name in ("read_file", "grep", "glob", "list_dir", "web_search", "edit_file",
                          "write_file", "run_tests", "todo_write", "run")]


def reply_for(message: Wire) -> Reply:
    # The fake renders no legacy `function_call`: its answer is text, and the client's own
    # message (with the call) is what the next request carries.
    if message.get("function_call"):
        fc = message["function_call"]
        return Reply.text(message.get("content") or f"calling {fc['name']}")
    return Reply.repeating(message)


@dataclass
class Replay:
    statuses: list[int] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    upstream: list[bytes] = field(default_factory=list)
    compactions: list[str | None] = field(default_factory=list)

    def turn(self, client: httpx.Client, base_url: str, fake: FakeUpstream, thread: str,
             body: Wire, reply: Reply) -> None:
        """One chat request, answered with `reply`: what was sent, what reached the upstream."""
        fake.script(reply)
        sent = orjson.dumps(body)
        before = len(fake.requests)
        answer = client.post(f"{base_url}/chat/completions", content=sent,
                             headers={"content-type": "application/json",
                                      "authorization": f"Bearer {API_KEY}", "x-thread-id": thread})
        self.statuses.append(answer.status_code)
        assert answer.status_code == 200, answer.text
        main = [r for r in fake.requests[before:] if not is_summarizer_request(r.json)]
        self.sent.append(sent)
        self.upstream.append(main[-1].body)
        self.compactions.append(answer.headers.get("x-compaction"))


def replay(base_url: str, fake: FakeUpstream, messages: Sequence[Wire], thread: str,
           *, shape: Callable[[list[Wire]], list[Wire]] = list,
           body: Callable[[int], Wire] = lambda k: {"model": "small-coder"}) -> Replay:
    out = Replay()
    with httpx.Client(timeout=60) as client:
        for k in range(1, len(messages)):
            if messages[k]["role"] != "assistant" or messages[k - 1]["role"] == "assistant":
                continue
            body_k = {**body(k), "messages": shape(list(messages[:k]))}
            out.turn(client, base_url, fake, thread, body_k, reply_for(messages[k]))
    return out


def elements(body: bytes, key: str = "messages") -> tuple[bytes, ...]:
    spans = locate_array(body, key, orjson.loads(body)[key])
    assert spans is not None
    return spans.elements


def chat_anomalies(sent: bytes, received: bytes, dialect: str = "openai") -> list[str]:
    """What is wrong with one upstream request `received` made from the client's `sent`."""
    problems: list[str] = []
    rejection = check_chat(orjson.loads(received), dialect)
    if rejection is not None:
        problems.append(f"provider rejects: {rejection.body}")
    client, model = elements(sent), elements(received)
    lead = 0
    while lead < len(client) and orjson.loads(client[lead])["role"] in ("system", "developer"):
        lead += 1
    if model[:lead] != client[:lead]:
        problems.append("leading system messages changed")
    last_user = max(i for i, e in enumerate(client) if orjson.loads(e)["role"] == "user")
    if client[last_user] not in model:
        words = _text(orjson.loads(client[last_user]).get("content"))
        if not any(words in _text(orjson.loads(e).get("content")) for e in model):
            problems.append("latest user message neither sent nor restored")
        else:
            problems.append(RESTORED)
    if received == sent:
        return problems
    originals = {_key(orjson.loads(e)): orjson.loads(e) for e in client}
    said = {(m["role"], _text(m.get("content"))): _public(m) for m in map(orjson.loads, client)
            if m["role"] in ("user", "system", "assistant") and _key(m) is None}
    for element in model:
        if element in client:
            continue
        message = orjson.loads(element)
        original = said.get((message.get("role"), _text(message.get("content"))))
        # Only the sanitizer touches a kept message, and only an assistant's private fields.
        if original is not None and (message["role"] != "assistant" or original != _public(message)):
            problems.append(f"a {message['role']} message went up changed")
        original = originals.get(_key(message)) if _key(message) is not None else None
        if original is None:
            continue  # made by the proxy (summary, restored, collapse record, cancelled result)
        for name in original.keys() - {"content", "tool_calls", "function_call", *PRIVATE}:
            if message.get(name) != original[name]:
                problems.append(f"field {name!r} of a kept message changed: {message.get(name)!r}")
        if isinstance(original.get("content"), list) and not isinstance(message.get("content"), list):
            if original["role"] != "tool":
                problems.append(f"part-list content of a {original['role']} became a string")
        if isinstance(original.get("content"), list) and isinstance(message.get("content"), list):
            for a, b in zip(original["content"], message["content"]):
                if a.get("cache_control") != b.get("cache_control"):
                    problems.append("cache_control of a kept part changed")
    return problems


def _key(message: Wire) -> Any:
    """What tells a client message apart from the proxy's rewrite of it."""
    if message.get("role") == "tool":
        return ("tool", message.get("tool_call_id"))
    calls = message.get("tool_calls")
    if calls:
        return ("calls", tuple(c.get("id") for c in calls))
    return None


def _public(message: Wire) -> Wire:
    return {k: v for k, v in message.items() if k not in PRIVATE}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def send_turns(base_url: str, fake: FakeUpstream, turns: Sequence[tuple[Wire, Reply]],
               thread: str) -> Replay:
    """Post each prepared body (its `messages` as the client rebuilt them), the fake answering
    with the paired reply."""
    out = Replay()
    with httpx.Client(timeout=60) as client:
        for body, reply in turns:
            out.turn(client, base_url, fake, thread, body, reply)
    return out
