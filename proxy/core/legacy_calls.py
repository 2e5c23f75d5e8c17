"""The deprecated chat form of one tool call, seen as a one-call tool step.

An assistant message with `function_call: {name, arguments}` (and no `tool_calls`) makes one
call; the `role: "function"` message right after it, named after the function, is its result
(PROTOCOL.md §1.1). The form has no ids: position pairs the two. Collapse's steps and restore's
reads are written over calls with ids and results that answer an id, so here such a call gets
`LEGACY_CALL_ID` and its result answers it, but only the proxy's bookkeeping sees that id:
nothing writes a call or a result from it, so it never reaches upstream, and the entries keep
their kinds (`calls` stays empty, the result stays `OTHER`) for every other stage.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy import jsonio
from proxy.conversation import Entry, ToolCall, entry_from_chat
from proxy.core.kinds import ASSISTANT, CHAT, OTHER, RESULT

# Unlike the ids providers issue (letters, digits, `_`, `-`), so it does not pass for one.
LEGACY_CALL_ID = "<legacy function_call>"
_CALL = ("legacy.call",)


def legacy_call(entry: Entry) -> ToolCall | None:
    """The one call of a chat assistant message's `function_call` (memoized on the entry)."""
    if entry.api is not CHAT or entry.kind is not ASSISTANT or entry.calls:
        return None
    if "function_call" not in entry.raw:
        return None  # most assistant messages: no memo entry for them
    found = entry.memo.get(_CALL, False)
    if found is False:
        found = entry.memo[_CALL] = _call_of(entry.raw["function_call"])
    return found


def _call_of(function_call: object) -> ToolCall | None:
    """A call by its name, which pairs it; arguments that are not a string (upstream judges
    them) are read as their JSON text, as a tool call's are."""
    if not isinstance(function_call, dict):
        return None
    name, arguments = function_call.get("name"), function_call.get("arguments")
    if not isinstance(name, str):
        return None
    if not isinstance(arguments, str):
        arguments = "" if arguments is None else jsonio.dumps_text(arguments)
    return ToolCall(LEGACY_CALL_ID, name, arguments)


def is_legacy_result(entry: Entry) -> bool:
    return entry.api is CHAT and entry.role == "function"


def answers_legacy_call(entry: Entry, call: ToolCall) -> bool:
    """Whether `entry`, right after the legacy `call`, is its answer as upstream pairs them: a
    `function` message of the call's name, whatever its content (null is allowed there)."""
    return entry.kind is OTHER and is_legacy_result(entry) and entry.raw.get("name") == call.name


def legacy_answer(call: ToolCall, entry: Entry) -> str | None:
    """The call id `entry` answers as the result right after the legacy `call`, if it does
    (`answers_legacy_call`): a `tool` message never does."""
    return call.id if answers_legacy_call(entry, call) else None


def is_chat_result(entry: Entry) -> bool:
    """A chat result of either form: a `tool` message, or a legacy `function` one."""
    return entry.kind is RESULT or (entry.kind is OTHER and is_legacy_result(entry))


def make_legacy_result(call: ToolCall, text: str) -> Entry:
    """The `function` message answering a legacy call (repair's cancelled result): the form
    has no ids, so it carries the call's name and goes right after it."""
    return entry_from_chat({"role": "function", "name": call.name, "content": text})


def step_calls(entry: Entry) -> tuple[ToolCall, ...]:
    """The calls an entry makes: its tool calls, or its legacy call."""
    if entry.calls:
        return entry.calls
    call = legacy_call(entry)
    return () if call is None else (call,)


def answered(entries: Sequence[Entry], i: int) -> str | None:
    """The id of the call `entries[i]` answers: a tool result's own, or `LEGACY_CALL_ID` for a
    `function` message right after the legacy call of its name. A legacy result without
    content (null) answers nothing: it says neither that the call worked nor what it read."""
    entry = entries[i]
    if entry.kind is RESULT:
        return entry.answers
    if i == 0 or not is_legacy_result(entry) or not isinstance(entry.raw.get("content"), (str, list)):
        return None
    call = legacy_call(entries[i - 1])
    return LEGACY_CALL_ID if call is not None and call.name == entry.raw.get("name") else None
