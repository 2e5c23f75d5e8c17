"""A Codex CLI session on the Responses API, driven live against the fake upstream.

Codex's request shape (openai/codex `client.rs` and `prompt.rs` as documented; details from
memory are marked): `store: false`, `stream: true`, `include: ["reasoning.encrypted_content"]`,
`prompt_cache_key` and the `session_id` header both set to the conversation id, long
`instructions`, tools of three kinds (a `function` shell, the freeform `custom` apply_patch tool
with a Lark grammar, `local_shell`), and `reasoning: {effort, summary: "auto"}`. The client
appends every output item it received (reasoning with `encrypted_content` and `summary`,
`function_call`, `custom_tool_call`) to its history, then the outputs it ran. Older turns carry
`local_shell_call` items (the tool of earlier Codex versions, answered by
`local_shell_call_output`) [MEM: the exact mix of tool kinds in one thread is this test's
choice, not a recorded trace].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply, call
from proxy.testing.summarizer import is_summarizer_request
from tests.client_shapes import elements
from tests.conftest import API_KEY

Wire = dict[str, Any]
INSTRUCTIONS = "".join(f"Codex rule {i:03d}: be precise, run tests, keep patches small.\n"
                       for i in range(120))
TOOLS = [
    {"type": "function", "name": "shell", "description": "Runs a shell command.", "strict": False,
     "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {
         "type": "string"}}, "workdir": {"type": "string"}}, "required": ["command"]}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch to files.",
     "format": {"type": "grammar", "syntax": "lark",
                "definition": 'start: "*** Begin Patch" LF hunk+ "*** End Patch"\n%import common.LF'}},
    {"type": "local_shell"},
]


def _patch(step: int) -> str:
    body = "".join(f"+    value_{step}_{j} = compute({j})\n" for j in range(40))
    return f"*** Begin Patch\n*** Update File: src/mod_{step % 7}.py\n@@ def run():\n{body}*** End Patch"


def _listing(step: int) -> str:
    return "".join(f"src/mod_{step % 7}.py:{j}: def helper_{j}(x): return x * {j}\n" for j in range(120))


def _message(role: str, text: str) -> Wire:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def _reply(step: int) -> Reply:
    """The model's turn at `step`: a shell call, a patch, or a closing message."""
    thinking = f"Step {step}: decide what to do next."
    if step % 6 == 5:
        return Reply.text(f"Done with task part {step}.", reasoning=thinking)
    if step % 3 == 1:
        return Reply.tool_calls(call("apply_patch", _patch(step), custom=True), reasoning=thinking)
    return Reply.tool_calls(call("shell", {"command": ["rg", "-n", f"helper_{step}", "src"]}),
                            reasoning=thinking)


def _output(item: Wire, step: int) -> Wire | None:
    if item["type"] == "custom_tool_call":
        return {"type": "custom_tool_call_output", "call_id": item["call_id"],
                "output": f"Success. Updated the following files:\nM src/mod_{step % 7}.py\n"}
    if item["type"] == "function_call":
        return {"type": "function_call_output", "call_id": item["call_id"],
                "output": f"Exit code: 0\nWall time: 0.1 seconds\nOutput:\n{_listing(step)}"}
    return None


def _legacy_shell(step: int) -> list[Wire]:
    """An older turn's local shell call and its output (a client-made history item)."""
    call_id = f"call_lsh_{step:04d}"
    return [{"type": "local_shell_call", "id": f"lsh_{step:04d}", "call_id": call_id,
             "status": "completed",
             "action": {"type": "exec", "command": ["bash", "-lc", f"ls src/{step}"],
                        "env": {}, "timeout_ms": 10_000, "working_directory": "/repo"}},
            {"type": "local_shell_call_output", "call_id": call_id, "output": _listing(step)}]


@dataclass
class CodexRun:
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    upstream: list[bytes] = field(default_factory=list)
    compactions: list[str | None] = field(default_factory=list)
    history: list[Wire] = field(default_factory=list)


def codex_session(base_url: str, fake: FakeUpstream, thread: str, turns: int,
                  session_header: bool = True) -> CodexRun:
    run = CodexRun()
    run.history = [_message("developer", "<permissions instructions>sandbox: workspace-write"
                            "</permissions instructions>"),
                   _message("user", "# AGENTS.md instructions for /repo\n" + "Use pytest.\n" * 50),
                   _message("user", "<environment_context><cwd>/repo</cwd></environment_context>")]
    with httpx.Client(timeout=60) as client:
        for step in range(turns):
            if step % 6 == 0:
                run.history.append(_message("user", f"Task {step}: refactor helper_{step}."))
                run.history += _legacy_shell(step)
            fake.script(_reply(step))
            body = {"model": "small-coder", "instructions": INSTRUCTIONS, "input": run.history,
                    "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
                    "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
                    "stream": True, "include": ["reasoning.encrypted_content"],
                    "prompt_cache_key": thread}
            sent = orjson.dumps(body)
            before = len(fake.requests)
            headers = {"content-type": "application/json", "authorization": f"Bearer {API_KEY}"}
            if session_header:
                headers["session_id"] = thread
            answer = client.post(f"{base_url}/responses", content=sent, headers=headers)
            run.statuses.append(answer.status_code)
            if answer.status_code != 200:
                run.errors.append(answer.text)
                break
            items = _done_items(answer.text)
            assert items, answer.text[:500]
            main = [r for r in fake.requests[before:] if not is_summarizer_request(r.json)]
            run.sent.append(sent)
            run.upstream.append(main[-1].body)
            run.compactions.append(answer.headers.get("x-compaction"))
            run.history += items
            if step % 12 == 7:  # the user interrupts the patch (Esc) and says what to do instead
                run.history.append(_message("user", f"Stop: skip that patch, look at helper_{step}."))
                continue
            run.history += [o for o in (_output(i, step) for i in items) if o is not None]
    return run


def _done_items(stream: str) -> list[Wire]:
    """The items of `response.output_item.done` events, as Codex collects them."""
    out = []
    for line in stream.splitlines():
        if line.startswith("data: ") and '"response.output_item.done"' in line:
            out.append(orjson.loads(line[6:])["item"])
    return out


_CALLS = ("function_call", "custom_tool_call", "local_shell_call")


def codex_anomalies(sent: bytes, received: bytes) -> list[str]:
    problems: list[str] = []
    client_body, model_body = orjson.loads(sent), orjson.loads(received)
    for key in ("instructions", "tools", "include", "store", "prompt_cache_key", "reasoning"):
        if client_body.get(key) != model_body.get(key):
            problems.append(f"body field {key!r} changed")
    client, model = elements(sent, "input"), elements(received, "input")
    if model[:1] != client[:1]:
        problems.append("leading developer message changed")
    items = [orjson.loads(e) for e in model]
    last_user = max(i for i, e in enumerate(client) if orjson.loads(e).get("role") == "user")
    if client[last_user] not in model:
        words = orjson.loads(client[last_user])["content"][0]["text"]
        if words not in received.decode():
            problems.append("latest user message neither sent nor restored")
    problems += _pairing(items)
    outputs = {(i.get("type"), i.get("call_id")) for i in map(orjson.loads, client)}
    for element, item in zip(model, items):
        if element in client or "call_id" not in item:
            continue
        kind = item["type"]
        if kind.endswith("_output") and (kind, item["call_id"]) not in outputs:
            text = str(item.get("output"))
            if "cancel" not in text.lower():
                problems.append(f"a made-up {kind} does not say it was cancelled: {text[:80]}")
        elif kind in _CALLS:
            original = next((orjson.loads(e) for e in client if orjson.loads(e).get("type") == kind
                             and orjson.loads(e).get("call_id") == item["call_id"]), None)
            if original is None:
                problems.append(f"{kind} {item['call_id']} not from the client")
            else:
                # A server id goes with its dropped reasoning item (PROTOCOL.md §2.3, rule 3).
                for name in original.keys() - {"arguments", "input", "action", "id"}:
                    if item.get(name) != original[name]:
                        problems.append(f"{kind} field {name!r} changed")
    return problems


def _pairing(items: Sequence[Wire]) -> list[str]:
    """Every client-run call answered by an output of its own type, in order."""
    problems = []
    calls = {i["call_id"]: i["type"] for i in items if i.get("type") in _CALLS}
    for item in items:
        kind = item.get("type", "")
        if kind.endswith("_call_output"):
            made_by = calls.get(item.get("call_id"))
            if made_by is None:
                problems.append(f"orphan {kind}")
            elif f"{made_by}_output" != kind:
                problems.append(f"{made_by} answered by {kind}")
    answered = {i.get("call_id") for i in items if i.get("type", "").endswith("_output")}
    problems += [f"unanswered {kind}" for cid, kind in calls.items() if cid not in answered]
    return problems
