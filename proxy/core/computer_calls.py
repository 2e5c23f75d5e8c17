"""The note that stands in for an interrupted Responses `computer_call` (repair, SPEC §5).

OpenAI refuses an input with a `computer_call` and no `computer_call_output` after it ("No tool
output found for computer call call_..."), and the only honest output, a screenshot, is
nothing the proxy has. So repair takes the call out and puts this assistant note in its place:
it names the action (its `type` and a short rendering of its parameters), says its outcome is
unknown, and names the safety checks the call was waiting on, never acknowledged.

The text depends on the item alone (prompt caches stay warm). Values are cut short and
JSON-quoted: a typed text may be long or hold a newline or a bracket that would read as the
end of the note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy import jsonio

NOTE_OPENING = "[compaction-proxy note, not written by the assistant: "
_MAX_VALUE = 40  # characters of one rendered parameter value
_MAX_ACTIONS = 4  # of a batched `actions` list; the rest are counted
_MAX_CHECKS = 4


def interrupted_computer_note(item: Mapping[str, Any]) -> str:
    """The note for an unanswered `computer_call` item."""
    actions = _actions(item)
    shown = "; ".join(_action(a) for a in actions[:_MAX_ACTIONS]) or "an unnamed action"
    if len(actions) > _MAX_ACTIONS:
        shown += f"; and {len(actions) - _MAX_ACTIONS} more"
    text = (f"{NOTE_OPENING}a computer action was requested here ({shown}) and interrupted "
            "before its screenshot came back; whether it ran and its outcome are unknown.")
    checks = item.get("pending_safety_checks")
    if isinstance(checks, list) and checks:
        codes = [_value(c.get("code")) if isinstance(c, Mapping) and "code" in c else "unnamed"
                 for c in checks[:_MAX_CHECKS]]
        more = f" and {len(checks) - _MAX_CHECKS} more" if len(checks) > _MAX_CHECKS else ""
        text += (f" It was waiting on {len(checks)} pending safety check(s), never "
                 f"acknowledged: {', '.join(codes)}{more}.")
    return text + "]"


def _actions(item: Mapping[str, Any]) -> list[Any]:
    """The call's action, or its batched `actions` (the fake upstream takes either field)."""
    if isinstance(item.get("actions"), list):
        return list(item["actions"])
    return [item["action"]] if "action" in item else []


def _action(action: Any) -> str:
    if not isinstance(action, Mapping):
        return _value(action)
    kind = action.get("type")
    name = kind if isinstance(kind, str) and kind.isidentifier() else _value(kind)
    params = " ".join(f"{_key(k)}={_value(v)}" for k, v in action.items() if k != "type")
    return f"{name} {params}" if params else name


def _key(key: str) -> str:
    return key if key.isidentifier() else _value(key)


def _value(value: Any) -> str:
    cut = False
    text = value if isinstance(value, str) else _json(value)
    if len(text) > _MAX_VALUE:
        text, cut = text[:_MAX_VALUE] + "…", True
    # Quoted: no newline gets in, and a bracket reads as part of the value, not the note's end.
    return _json(text) if isinstance(value, str) or cut else text


def _json(value: Any) -> str:
    try:
        return jsonio.dumps_text(value)
    except ValueError:  # NaN or Infinity, which the standard library's parse lets in
        return str(value)
