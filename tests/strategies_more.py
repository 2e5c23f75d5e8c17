"""More conversation shapes, drawn over `tests.strategies.conversations` (which stays as it is).

`richer(api, messy=...)` takes a drawn conversation and reshapes it the ways real clients
write the same content, which the base draw never produces:
- Responses messages in the easy-input form (`{"role": ..., "content": "text"}`, no `type`),
  or typed with string content; `input_file` parts (by id or inline data) on user messages;
  `status` on calls and outputs, as an SDK echoes them;
- chat user messages with a `name`, `file` and `input_audio` parts; assistant messages with
  the null fields SDKs echo (`refusal`, `audio`) and empty `annotations`;
- huge tool-call arguments (a JSON string value of 20-120 thousand characters, so the
  arguments stay valid JSON);
- every object's keys in a drawn order (a client may serialize in any order).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.strategies import Wire, conversations

_FILE_PARTS = ({"type": "input_file", "file_id": "file-7Qx2"},
               {"type": "input_file", "filename": "report.pdf",
                "file_data": "data:application/pdf;base64,JVBERi0xLjQK"})
_CHAT_PARTS = ({"type": "file", "file": {"file_id": "file-7Qx2"}},
               {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}})
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


@st.composite
def shuffled(draw: st.DrawFn, node: Any) -> Any:
    """`node` with the keys of every object in a drawn order (lists keep theirs)."""
    if isinstance(node, list):
        return [draw(shuffled(v)) for v in node]
    if not isinstance(node, dict):
        return node
    keys = draw(st.permutations(list(node)))
    return {k: draw(shuffled(node[k])) for k in keys}


@st.composite
def huge_arguments(draw: st.DrawFn) -> str:
    size = draw(st.integers(20_000, 120_000))
    filler = draw(st.sampled_from(("x", "数据", "line\n", "\"q\" ")))
    value = (filler * (size // len(filler) + 1))[:size]
    return json.dumps({"path": "src/big.py", "content": value}, ensure_ascii=draw(st.booleans()))


def _text_of(item: Wire) -> str | None:
    """The text of a Responses message of one text part, else None."""
    content = item.get("content")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and content[0].get("type") in ("input_text", "output_text"):
        return str(content[0].get("text"))
    return None


@st.composite
def _responses_item(draw: st.DrawFn, item: Wire) -> Wire:
    kind = item.get("type")
    if kind == "message":
        text = _text_of(item)
        if item.get("role") == "user" and isinstance(item.get("content"), list) and draw(st.integers(0, 3)) == 0:
            return {**item, "content": [*item["content"], draw(st.sampled_from(_FILE_PARTS))]}
        form = draw(st.integers(0, 2))
        if text is not None and form == 0 and "id" not in item:
            return {"role": item["role"], "content": text}
        if text is not None and form == 1:
            return {**item, "content": text}
        return item
    if kind in _CALLS:
        out = {**item, "status": "completed"} if draw(st.booleans()) else item
        if kind == "function_call" and draw(st.integers(0, 9)) == 0:
            out = {**out, "arguments": draw(huge_arguments())}
        return out
    if kind in _OUTPUTS and draw(st.integers(0, 2)) == 0:
        return {**item, "status": "completed"}
    return item


@st.composite
def _chat_message(draw: st.DrawFn, message: Wire) -> Wire:
    role = message.get("role")
    if role == "user":
        out = {**message, "name": "dev_1"} if draw(st.integers(0, 3)) == 0 else dict(message)
        if draw(st.integers(0, 3)) == 0:
            content = out.get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": content or "look"}]
            out["content"] = [*parts, draw(st.sampled_from(_CHAT_PARTS))]
        return out
    if role != "assistant":
        return message
    out = dict(message)
    if draw(st.booleans()):
        out.update({"refusal": None, "audio": None, "annotations": []})
    calls = out.get("tool_calls")
    if isinstance(calls, list) and draw(st.integers(0, 9)) == 0:
        k = draw(st.integers(0, len(calls) - 1))
        if calls[k].get("type") == "function":
            big = {**calls[k], "function": {**calls[k]["function"], "arguments": draw(huge_arguments())}}
            out["tool_calls"] = [*calls[:k], big, *calls[k + 1:]]
    return out


@st.composite
def reshaped(draw: st.DrawFn, api: str, elements: list[Wire]) -> list[Wire]:
    """`elements` written the other ways clients write them (see the module docstring)."""
    one = _chat_message if api == "chat" else _responses_item
    out = [draw(one(e)) for e in elements]
    return [draw(shuffled(e)) for e in out] if draw(st.booleans()) else out


@st.composite
def richer(draw: st.DrawFn, api: str, messy: bool = False, max_turns: int = 4) -> list[Wire]:
    return draw(reshaped(api, draw(conversations(api, messy=messy, max_turns=max_turns))))


__all__ = ["huge_arguments", "reshaped", "richer", "shuffled"]
