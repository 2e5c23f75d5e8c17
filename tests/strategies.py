"""Hypothesis strategies for whole conversations, chat `messages` or Responses `input` items.

`conversations(api, messy=..., dialect=...)` draws a list of wire elements: leading
instructions, turns of a user message (text, parts, images, empty, CJK) and assistant steps
(text, or one to three parallel tool calls with short, long, error, empty or multi-part
results; custom tools with free-form input; in chat, a single call sometimes in the legacy
`function_call` form; `legacy=True`: every such step; in Responses, a reasoned step
sometimes opens with a server tool's item, a web search or a code run, with its id), with
provider-private reasoning of every kind.
`messy=True` then damages the list the ways clients do: interrupted calls, orphan results,
duplicate results, results moved away from their call, two parallel calls given one id,
reasoning items left dangling.
`dialect` draws a conversation that the fake upstream's dialect accepts as sent, with blobs
signed by the fake's signer (`SIGNER`), so tests can check the proxy keeps it acceptable.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from proxy.testing.responses_rules import ID_REQUIRED
from proxy.testing.signing import DEFAULT_SIGNER as SIGNER
from tests.damage import damaged, is_answer, with_shared_id

Wire = dict[str, Any]

EXPLORATION = ("read_file", "grep", "glob", "list_dir", "web_search", "search")
OTHER_TOOLS = ("edit_file", "bash", "write_file", "todo_write")
PATHS = ("src/app.py", "src/路径/模块.py", "tests/test_app.py", "docs/readme.md", "a b/c.txt")
IMAGE = "data:image/png;base64,iVBORw0KGgo="
WORDS = ("fix", "the", "failing", "test", "修复", "这个", "错误", "テスト", "🙂", "", " ", "\n",
         '"quoted"', "back\\slash", "src/app.py:12", "Error:", "ok")
# What an OpenAI reasoning item produces has an id that begins so, as OpenAI's documented
# examples spell them (the tests' own list, apart from `proxy.core.boundary`'s).
PRODUCED_ID_PREFIXES = ("fc_", "ctc_", "msg_", "ws_", "fs_", "cu_", "ci_", "ig_", "lsh_", "mcp_",
                        "mcpl_", "mcpr_")
# Server items a reasoned step may produce besides its message and calls, and their ids' prefix.
_SERVER_ITEMS = (
    ({"type": "web_search_call", "status": "completed",
      "action": {"type": "search", "query": "修复 the test"}}, "ws"),
    ({"type": "code_interpreter_call", "status": "completed", "code": "print(1)",
      "container_id": "cntr_1", "outputs": [{"type": "logs", "logs": "1"}]}, "ci"),
)
_SERVER_PREFIX = {item["type"]: prefix for item, prefix in _SERVER_ITEMS}


def is_server_item(element: Wire) -> bool:
    """An item a server tool made (the fake's rules, as OpenAI's: its id is required). Part of
    the reasoning chain, it goes upstream with its reasoning item or not at all."""
    return isinstance(element, dict) and element.get("type") in ID_REQUIRED


def _not_a_secret(text: str) -> bool:
    # Hypothesis also draws string constants it finds in the code under test ("reasoning_content",
    # "thought_signature"...): visible text must not spell what the privacy checks look for.
    return not any(secret in text for secret in SECRETS)


short_text = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join),
    # utf-8 has no lone surrogates
    st.text(st.characters(codec="utf-8"), max_size=24).filter(_not_a_secret),
)
long_text = st.builds(lambda n, w: (w + " ") * n, st.integers(300, 1200),
                      st.sampled_from(("line of code", "数据", "x")))
any_text = st.one_of(short_text, short_text, long_text)


@st.composite
def _arguments(draw: st.DrawFn, name: str) -> dict[str, Any]:
    path = draw(st.sampled_from(PATHS))
    if name == "read_file":
        if draw(st.booleans()):
            start = draw(st.integers(1, 400))
            return {"path": path, "start_line": start, "end_line": start + draw(st.integers(0, 200))}
        return {"path": path}
    if name in ("grep", "search", "web_search", "glob"):
        return {"pattern" if name != "web_search" else "query": draw(short_text), "path": path}
    if name == "list_dir":
        return {"path": path}
    if name == "edit_file":
        return {"path": path, "old_string": draw(any_text), "new_string": draw(any_text),
                "edits": [{"find": draw(any_text), "count": draw(st.integers(0, 3))}]}
    if name == "write_file":
        return {"path": path, "content": draw(any_text)}
    return {"command": draw(any_text), "timeout": draw(st.integers(1, 600))}


_result_body = st.one_of(any_text, st.just(""), st.sampled_from(
    ("Error: No such file or directory", "Traceback (most recent call last):\n  boom")))


@st.composite
def _call(draw: st.DrawFn, n: int) -> dict[str, Any]:
    if draw(st.integers(0, 9)) == 0:
        return {"id": f"call_{n}", "name": "apply_patch", "custom": True,
                "arguments": draw(any_text), "result": draw(_result_body), "parts": False}
    name = draw(st.sampled_from(EXPLORATION + EXPLORATION + OTHER_TOOLS))
    return {"id": f"call_{n}", "name": name, "custom": False,
            "arguments": json.dumps(draw(_arguments(name)), ensure_ascii=draw(st.booleans())),
            "result": draw(_result_body), "parts": draw(st.integers(0, 5)) == 0}


@st.composite
def _turns(draw: st.DrawFn, max_turns: int, legacy: bool = False) -> list[dict[str, Any]]:
    """The abstract conversation: turns of a user message and assistant steps (`legacy`: every
    step of one function call in the deprecated form)."""
    counter = iter(range(10_000))
    turns = []
    for _ in range(draw(st.integers(1, max_turns))):
        steps: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(0, 5))):
            if draw(st.integers(0, 3)) == 0:
                steps.append({"text": draw(short_text), "calls": []})
            else:
                calls = [draw(_call(next(counter))) for _ in range(draw(st.integers(1, 3)))]
                steps.append({"text": draw(st.sampled_from((None, None, "", "Let me look."))),
                              "calls": calls, "legacy": draw(_legacy(calls, legacy))})
        turns.append({"user": draw(short_text), "image": draw(st.integers(0, 4)) == 0,
                      "empty": draw(st.integers(0, 9)) == 0, "steps": steps})
    return turns


def _legacy(calls: list[dict[str, Any]], always: bool = False) -> st.SearchStrategy[bool]:
    """Whether a chat step of one function call is sent in the deprecated form (`function_call`
    answered by a `role: "function"` message), as a client of the legacy API sends it."""
    if len(calls) != 1 or calls[0]["custom"]:
        return st.just(False)
    return st.just(True) if always else st.integers(0, 3).map(lambda n: n == 0)


# ---------------------------------------------------------------- chat

_DETAILS = (
    {"type": "reasoning.text", "text": "thinking…", "signature": "EpYBCkgIBRAB",
     "format": "anthropic-claude-v1", "index": 0},
    {"type": "reasoning.encrypted", "data": "gAAAAABenc", "format": "openai-responses-v1", "index": 0},
    {"type": "reasoning.summary", "summary": "I read the file.", "format": "unknown", "index": 0},
    {"type": "reasoning.text", "text": "plain thought", "format": "unknown", "index": 1},
)
_BLOCKS = ({"type": "thinking", "thinking": "hmm", "signature": "sig-abc"},
           {"type": "redacted_thinking", "data": "cmVkYWN0ZWQ="},
           {"type": "thinking", "thinking": "unsigned"})


@st.composite
def _chat_private(draw: st.DrawFn, dialect: str | None, calls: bool) -> dict[str, Any]:
    if dialect in ("deepseek-thinking", "kimi-thinking"):
        return {"reasoning_content": draw(short_text)} if calls or draw(st.booleans()) else {}
    if dialect == "openrouter":
        details: list[Any] = [SIGNER.sign_detail({**_DETAILS[0], "text": draw(short_text)})]
        return {"reasoning": "…", "reasoning_details": details} if draw(st.booleans()) or calls else {}
    if dialect is not None:
        return {}
    fields: dict[str, Any] = {}
    if draw(st.integers(0, 2)) == 0:
        fields["reasoning_content"] = draw(short_text)
    if draw(st.integers(0, 3)) == 0:
        fields["reasoning"] = draw(short_text)
    if draw(st.integers(0, 3)) == 0:
        fields["reasoning_details"] = draw(st.lists(st.sampled_from(_DETAILS), min_size=1, max_size=3))
    if draw(st.integers(0, 4)) == 0:
        fields["thinking_blocks"] = draw(st.lists(st.sampled_from(_BLOCKS), min_size=1, max_size=2))
    if draw(st.integers(0, 7)) == 0:
        fields["reasoning_items"] = [{"type": "reasoning", "id": "rs_lite", "summary": [],
                                      "encrypted_content": "gAAAAABlite"}]
    return fields


@st.composite
def _assistant_content(draw: st.DrawFn, text: str | None, dialect: str | None) -> Any:
    """The text as sent, or (any dialect) Anthropic-style parts with a thinking block first."""
    if dialect is not None or draw(st.integers(0, 5)) > 0:
        return text
    thinking = draw(st.sampled_from(_BLOCKS))
    return [thinking] + ([{"type": "text", "text": text}] if text else [])


def _signature(dialect: str | None, n: int) -> dict[str, Any]:
    value = SIGNER.thought_signature(n.to_bytes(8, "big")) if dialect == "gemini" else f"sig{n}"
    return {"extra_content": {"google": {"thought_signature": value}}}


@st.composite
def _chat(draw: st.DrawFn, turns: list[dict[str, Any]], dialect: str | None) -> list[Wire]:
    out: list[Wire] = [{"role": r, "content": draw(short_text)}
                       for r in draw(st.lists(st.sampled_from(("system", "developer")), max_size=2))]
    for turn in turns:
        content: Any = "" if turn["empty"] else turn["user"]
        if turn["image"]:
            content = [{"type": "text", "text": turn["user"]},
                       {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}}]
        out.append({"role": "user", "content": content})
        for step in turn["steps"]:
            out += draw(_chat_step(step, dialect))
    return out


@st.composite
def _chat_step(draw: st.DrawFn, step: dict[str, Any], dialect: str | None) -> list[Wire]:
    if not step["calls"]:
        content = draw(_assistant_content(step["text"], dialect))
        return [{"role": "assistant", "content": content, **draw(_chat_private(dialect, False))}]
    if step.get("legacy") and dialect is None:  # the dialects' own rules are for tool_calls
        return _legacy_step(step, draw(_assistant_content(step["text"], dialect)))
    signed = dialect == "gemini" or (dialect is None and draw(st.integers(0, 3)) == 0)
    calls = []
    for k, c in enumerate(step["calls"]):
        body = ({"type": "custom", "custom": {"name": c["name"], "input": c["arguments"]}} if c["custom"]
                else {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}})
        extra = _signature(dialect, int(c["id"][5:])) if signed and k == 0 else {}
        calls.append({"id": c["id"], **body, **extra})
    message = {"role": "assistant", "content": draw(_assistant_content(step["text"], dialect)),
               "tool_calls": calls, **draw(_chat_private(dialect, True))}
    results = [{"role": "tool", "tool_call_id": c["id"],
                "content": [{"type": "text", "text": c["result"]}] if c["parts"] else c["result"]}
               for c in step["calls"]]
    return [message, *results]


def _legacy_step(step: dict[str, Any], content: Any) -> list[Wire]:
    (c,) = step["calls"]
    return [{"role": "assistant", "content": content,
             "function_call": {"name": c["name"], "arguments": c["arguments"]}},
            {"role": "function", "name": c["name"], "content": c["result"]}]


# ---------------------------------------------------------------- Responses

def _r_text(role: str, text: str) -> Wire:
    part = {"type": "output_text", "text": text, "annotations": []} if role == "assistant" else \
        {"type": "input_text", "text": text}
    return {"type": "message", "role": role, "content": [part]}


@st.composite
def _responses(draw: st.DrawFn, turns: list[dict[str, Any]], dialect: str | None) -> list[Wire]:
    out: list[Wire] = [_r_text(r, draw(short_text))
                       for r in draw(st.lists(st.sampled_from(("system", "developer")), max_size=2))]
    if dialect is None and draw(st.integers(0, 5)) == 0:
        out.append({"type": "compaction", "encrypted_content": "gAAAAABcompaction"})
    nonces = iter(range(10_000))
    for turn in turns:
        user = _r_text("user", "" if turn["empty"] else turn["user"])
        if turn["image"]:
            user["content"].append({"type": "input_image", "image_url": IMAGE, "detail": "low"})
        out.append(user)
        for step in turn["steps"]:
            out += draw(_responses_step(step, f"{next(nonces):024x}"))
    return out


@st.composite
def _responses_step(draw: st.DrawFn, step: dict[str, Any], nonce: str) -> list[Wire]:
    reasoned = draw(st.integers(0, 2)) > 0
    items: list[Wire] = []
    if reasoned:
        summary = [{"type": "summary_text", "text": draw(short_text)}] if draw(st.booleans()) else []
        items.append({"type": "reasoning", "id": SIGNER.reasoning_id(nonce), "summary": summary,
                      "encrypted_content": "pending"})
    produced: list[Wire] = []
    if reasoned and draw(st.integers(0, 3)) == 0:
        # A server call (a web search, a code run) before the step's message and calls. It
        # goes with its id (upstream requires it), which names the step's reasoning item.
        produced.append(json.loads(json.dumps(draw(st.sampled_from(_SERVER_ITEMS))[0])))
    if step["text"] or not step["calls"]:
        produced.append(_r_text("assistant", step["text"] or ""))
    for c in step["calls"]:
        kind, field = ("custom_tool_call", "input") if c["custom"] else ("function_call", "arguments")
        produced.append({"type": kind, "call_id": c["id"], "name": c["name"], field: c["arguments"]})
    # The items' ids: none, all, or (a client that rebuilt some items itself) only some.
    ids = draw(st.sampled_from(("none", "all", "some"))) if reasoned else "none"
    for k, item in enumerate(produced):
        server = _SERVER_PREFIX.get(item["type"])
        if server or ids == "all" or (ids == "some" and draw(st.booleans())):
            prefix = server or {"message": "msg", "custom_tool_call": "ctc"}.get(item["type"], "fc")
            item["id"] = SIGNER.item_id(prefix, nonce, k, reasoned=True)
    outputs = [{"type": "custom_tool_call_output" if c["custom"] else "function_call_output",
                "call_id": c["id"],
                "output": [{"type": "input_text", "text": c["result"]}] if c["parts"] else c["result"]}
               for c in step["calls"]]
    if len(outputs) > 1 and draw(st.integers(0, 3)) == 0:
        # A client that answers each call as it goes (OpenAI's function-calling guide appends
        # a call's output right after it): the step's items parted by outputs.
        answered: list[Wire] = []
        left = list(outputs)
        for item in produced:
            answered.append(item)
            found = next((o for o in left if o["call_id"] == item.get("call_id")), None)
            if found is not None:
                left.remove(found)
                answered.append(found)
        return items + answered + left
    return items + produced + outputs


def sign_encrypted(items: list[Wire]) -> list[Wire]:
    """Give every reasoning item the blob the fake would have issued for the items before it."""
    out: list[Wire] = []
    for k, item in enumerate(items):
        if item.get("type") == "reasoning" and "encrypted_content" in item:
            item = {**item, "encrypted_content": SIGNER.encrypted_content(out, k.to_bytes(4, "big"))}
        out.append(item)
    return out


@st.composite
def conversations(draw: st.DrawFn, api: str = "chat", messy: bool = False,
                  dialect: str | None = None, max_turns: int = 4, legacy: bool = False) -> list[Wire]:
    turns = draw(_turns(max_turns, legacy))
    elements = draw(_chat(turns, dialect) if api == "chat" else _responses(turns, dialect))
    if messy:
        elements = draw(damaged(elements, api))
    return sign_encrypted(elements) if api == "responses" else elements


@st.composite
def conversation_of(draw: st.DrawFn, api: str, turns: list[dict[str, Any]]) -> list[Wire]:
    """The wire list of given abstract turns (see `_turns` for their shape)."""
    elements = draw(_chat(turns, None) if api == "chat" else _responses(turns, None))
    return sign_encrypted(elements) if api == "responses" else elements


@st.composite
def interrupted(draw: st.DrawFn, api: str = "chat", max_turns: int = 4,
                legacy: bool = False) -> list[Wire]:
    """A valid conversation with each tool result (a legacy `function` one too) lost at even
    odds: parallel groups that lack several answers at once, the case where the order of made
    results shows."""
    elements = draw(conversations(api, max_turns=max_turns, legacy=legacy))
    return [e for e in elements if not (is_answer(e) and draw(st.booleans()))]


@st.composite
def cascade_contexts(draw: st.DrawFn, n: int, compaction: bool = False) -> Any:
    """A `CascadeContext` for a list of `n` client entries. With `compaction`, also a
    compacted projection, the keep-loop retry, message ids (the stored microcompact mark is
    then found by id) and a last activity anywhere; without, what the first tests drew."""
    from proxy.core.cascade import CascadeContext
    from proxy.records import MicrocompactMark
    from proxy.settings import CompactionSettings, TruncateSettings
    from tests.factories import measure

    by_tokens = draw(st.booleans())
    mark = draw(st.none() | st.integers(0, max(n - 1, 0)).map(lambda i: MicrocompactMark(None, i)))
    settings = CompactionSettings(truncate=TruncateSettings(max_arg_chars=draw(st.sampled_from((100, 2000))),
                                                            keep_chars=draw(st.sampled_from((0, 50)))))
    context = CascadeContext(settings, measure=measure,
                             keep_tokens=draw(st.integers(0, 3000)) if by_tokens else None,
                             keep_messages=None if by_tokens else draw(st.integers(0, 8)),
                             window_step=draw(st.none() | st.integers(1, 2000)),
                             now=draw(st.sampled_from((0.0, 1e9))), last_activity=0.0, mark=mark)
    if not compaction:
        return context
    ids = [f"msg-{i}" for i in range(n)] if draw(st.booleans()) else None
    if ids is not None and mark is not None and draw(st.booleans()):
        # Found by id at another index than the stored one: the client list moved under it.
        mark = MicrocompactMark(ids[mark.through_index], draw(st.integers(0, max(n - 1, 0))))
    return CascadeContext(settings, measure=measure, keep_tokens=context.keep_tokens,
                          keep_messages=context.keep_messages, window_step=context.window_step,
                          message_ids=ids, now=context.now,
                          last_activity=draw(st.sampled_from((0.0, 1e9 - 60.0, 1e9))), mark=mark,
                          compacted=draw(st.booleans()), keep_loop=draw(st.booleans()))


# ---------------------------------------------------------------- finding private state by text

# Plain reasoning text is drawn as random words, which the visible text may also contain:
# `marked` replaces every plain reasoning value by `MARK`, so that any reasoning that leaks
# shows up by substring, as the blobs and signatures (fixed texts, or under fixed keys) do.
MARK = "PRIVATE-REASONING"
SECRETS = (MARK, "EpYBCkgIBRAB", "gAAAAAB", "sig-abc", "cmVkYWN0ZWQ=", "thinking…", "plain thought",
           "I read the file.", "unsigned", "thought_signature", "encrypted_content", "reasoning_details",
           "thinking_blocks", "reasoning_content")


def marked(element: Any) -> Any:
    """The element with every plain reasoning value replaced by `MARK`."""
    if isinstance(element, list):
        return [marked(e) for e in element]
    if not isinstance(element, dict):
        return element
    out = {k: marked(v) for k, v in element.items()}
    for key in ("reasoning_content", "reasoning"):
        if isinstance(out.get(key), str):
            out[key] = MARK
    if out.get("type") == "summary_text":
        out["text"] = MARK
    if out.get("type") == "thinking":
        out["thinking"] = MARK
    return out


def request_points(elements: list[Wire]) -> list[int]:
    """Prefix lengths at which a client sends a request: after a user message, or after the
    last result of a tool step."""
    points = []
    for n in range(1, len(elements) + 1):
        last = elements[n - 1]
        after = elements[n] if n < len(elements) else None
        if last.get("role") == "user" or (is_answer(last) and (after is None or not is_answer(after))):
            points.append(n)
    return points


__all__ = ["MARK", "SECRETS", "SIGNER", "cascade_contexts", "conversation_of", "conversations", "interrupted",
           "marked", "request_points", "sign_encrypted", "with_shared_id"]
