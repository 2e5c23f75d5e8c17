"""What every OpenAI-compatible chat endpoint checks in `messages`, found once, worded per family.

`find_violation` walks the list and names the first problem (a `Violation`); the wording is the
provider's business (`chat_wording`: OpenAI's, DeepSeek's and Mistral's texts, PROTOCOL.md
§2.1). The pairing rule: every `tool` message sits in the contiguous run of tool
messages right after an assistant message whose `tool_calls` has its id, and that run answers
every id before any other message (or the end of the list). The deprecated single call
(`function_call`) is answered by the very next message, a `function` message of its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ROLES = ("system", "assistant", "user", "function", "tool", "developer")
MAX_STRING = 1_048_576  # characters in one string (PROTOCOL.md §2.1)


@dataclass(frozen=True)
class Violation:
    kind: str
    index: int  # the message the provider names
    ids: tuple[str, ...] = ()
    call: int = 0  # index inside `tool_calls` (or `content` for a content part)
    value: Any = None


@dataclass
class _Run:
    """The tool calls of one assistant message, waiting for their tool messages."""

    index: int
    ids: tuple[str, ...]
    answered: set[str]

    def missing(self) -> tuple[str, ...]:
        return tuple(i for i in self.ids if i not in self.answered)


def shape_violation(messages: Any, *, sent: bool = True) -> Violation | None:
    """Problems that make `messages` unreadable as a conversation at all. An absent `messages`
    (`sent` false) is a missing parameter, a null one a wrong type [3P: the probes table]."""
    if messages is None and not sent:
        return Violation("missing_param", 0, value="messages")
    if not isinstance(messages, list):
        return Violation("not_array", 0, value=("messages", messages))
    if not messages:
        return Violation("empty", 0)
    for i, message in enumerate(messages):
        found = _shape(i, message)
        if found is not None:
            return found
    # A missing content is reported only when no message has another schema fault: a bad role
    # or content type at a later index wins [3P: a table of direct-API probes, 2026-08-30].
    for i, message in enumerate(messages):
        found = _content_presence(i, message)
        if found is not None:
            return found
    return None


def find_violation(messages: Any) -> Violation | None:
    found = shape_violation(messages)
    if found is not None:
        return found
    run: _Run | None = None
    legacy: tuple[int, Any] | None = None  # the unanswered `function_call`: (index, its name)
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, str) and len(content) > MAX_STRING:
            return Violation("string_too_long", i, value=len(content))
        if message["role"] == "tool":
            found = _tool(i, message, run, messages)
            if found is not None:
                return found
            continue
        if run is not None and run.missing():
            return Violation("missing_responses", run.index, run.missing())
        run = None
        if message["role"] == "function":
            if legacy is None or legacy[1] != message.get("name"):
                return Violation("orphan_function", i, value=message.get("name"))
            legacy = None
            continue
        if legacy is not None:
            return Violation("missing_function_response", legacy[0], value=legacy[1])
        if message["role"] == "assistant":
            found = _assistant(i, message)
            if found is not None:
                return found
            ids = tuple(c["id"] for c in message.get("tool_calls") or () if isinstance(c.get("id"), str))
            run = _Run(i, ids, set()) if ids else None
            legacy = _legacy_call(i, message) if not ids else None
    if run is not None and run.missing():
        return Violation("missing_responses", run.index, run.missing())
    if legacy is not None:
        return Violation("missing_function_response", legacy[0], value=legacy[1])
    return None


def _legacy_call(i: int, message: Mapping[str, Any]) -> tuple[int, Any] | None:
    """The deprecated single call of an assistant message, which the next message answers: the
    form has no ids, so position pairs them, and the `function` message names the function."""
    call = message.get("function_call")
    return (i, call.get("name")) if isinstance(call, Mapping) else None


def _shape(i: int, message: Any) -> Violation | None:
    if not isinstance(message, Mapping):
        return Violation("not_object", i, value=message)
    if "role" not in message:
        return Violation("missing_param", i, value=f"messages[{i}].role")
    if message["role"] not in ROLES:
        return Violation("bad_role", i, value=message["role"])
    if message["role"] == "function":
        missing = "name" not in message
        return Violation("missing_role_field", i, value=("function", "name")) if missing else None
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        return Violation("content_type", i, value=content)
    if message["role"] == "tool" and content == []:
        # PROTOCOL.md §1.1: a tool message's array has `minItems: 1`.
        return Violation("empty_content", i)
    return _parts(i, message)


# What stands in for an assistant's content (PROTOCOL.md §1.1); a null one does not [3P: the
# probes table].
_CONTENT_SUBSTITUTES = ("tool_calls", "function_call", "refusal", "audio")


def _content_presence(i: int, message: Mapping[str, Any]) -> Violation | None:
    """Every role but `function` needs a non-null content, the assistant unless a substitute
    stands in. The developer's schema answers in its own words; every other role gets the
    sentence OpenAI gives a null content [OBS for user and assistant messages,
    openai/openai-cookbook#503, langchain-ai/langchainjs#4153; 3P for the roles, the absent
    field and the developer's words: the probes table]."""
    role = message["role"]
    if role == "function" or message.get("content") is not None:
        return None
    if role == "developer":
        if "content" not in message:
            return Violation("missing_param", i, value=f"messages[{i}].content")
        return Violation("content_type", i, value=None)
    if role == "assistant":
        # Checked with the pairing walk, which the dialects without it (vLLM) skip.
        return None
    return Violation("null_content", i)


# The content parts each role may send (PROTOCOL.md §1.1). The user's: the list OpenAI's
# answer names [OBS: "Invalid value: 'thinking'. Supported values are: 'text', 'image_url',
# 'input_audio', 'refusal', 'audio', and 'file'.", param `messages[i].content[j].type`, met by
# clients replaying Anthropic or Responses parts]. The assistant's are each dialect's: LiteLLM
# clients replay `thinking` parts there (§4.7); OpenAI's dialects check them against the
# user's list (`dialects.assistant_parts`, in the strict dialect).
USER_PART_TYPES = ("text", "image_url", "input_audio", "refusal", "audio", "file")
PART_TYPES = {"tool": ("text",), "system": ("text",), "developer": ("text",),
              "user": USER_PART_TYPES}


def _parts(i: int, message: Mapping[str, Any]) -> Violation | None:
    allowed = PART_TYPES.get(message["role"])
    content = message.get("content")
    if allowed is None or not isinstance(content, list):
        return None
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            return Violation("part_not_object", i, call=j, value=part)
        if part.get("type") == "image_url" and message["role"] != "user":
            return Violation("image_outside_user", i, value=message["role"])
        if part.get("type") not in allowed:
            return Violation("part_type", i, call=j, value=(part.get("type"), allowed))
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            return Violation("missing_param", i, value=f"messages[{i}].content[{j}].text")
    return None


def _tool(i: int, message: Mapping[str, Any], run: _Run | None, messages: list[Any]) -> Violation | None:
    call_id = message.get("tool_call_id")
    if call_id is None:
        return Violation("missing_role_field", i, value=("tool", "tool_call_id"))
    if not isinstance(call_id, str):
        return Violation("field_type", i, value=(f"messages[{i}].tool_call_id", call_id))
    if run is None:
        return Violation("orphan_tool", i, value=messages[i - 1].get("role") if i else None)
    if call_id not in run.ids:
        return Violation("unknown_call_id", i, (call_id,))
    run.answered.add(call_id)
    return None


def _assistant(i: int, message: Mapping[str, Any]) -> Violation | None:
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return Violation("not_array", i, value=(f"messages[{i}].tool_calls", calls))
    if calls == []:
        return Violation("empty_tool_calls", i)
    for j, call in enumerate(calls or ()):
        found = _call(i, j, call)
        if found is not None:
            return found
    if message.get("content") is not None or any(message.get(k) is not None
                                                 for k in _CONTENT_SUBSTITUTES):
        return None
    return Violation("null_content", i)


def _call(i: int, j: int, call: Any) -> Violation | None:
    if not isinstance(call, Mapping):
        return Violation("not_object", i, value=call)
    if not isinstance(call.get("id"), str):
        return Violation("missing_param", i, value=f"messages[{i}].tool_calls[{j}].id")
    if call.get("type") == "custom":
        return None
    function = call.get("function")
    if not isinstance(function, Mapping):
        return Violation("missing_param", i, value=f"messages[{i}].tool_calls[{j}].function")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return Violation("arguments_type", i, call=j, value=arguments)
    # Unparsable arguments are accepted: PROTOCOL.md §1.1 says the model "does not always
    # generate valid JSON" and records no OpenAI rejection (`dialects.json_arguments`: vLLM).
    return None
