"""What every OpenAI-compatible chat endpoint checks in `messages`, found once, worded per family.

`find_violation` walks the list and names the first problem (a `Violation`); the wording is the
provider's business, so OpenAI, DeepSeek and Mistral texts are separate small tables
(PROTOCOL.md §2.1). The pairing rule: every `tool` message sits in the contiguous run of tool
messages right after an assistant message whose `tool_calls` has its id, and that run answers
every id before any other message (or the end of the list). The deprecated single call
(`function_call`) is answered by the very next message, a `function` message of its name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.testing import rejections
from proxy.testing.rejections import Rejection

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


def shape_violation(messages: Any) -> Violation | None:
    """Problems that make `messages` unreadable as a conversation at all."""
    if messages is None:
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


# ---------------------------------------------------------------- OpenAI's wording

def type_name(value: Any) -> str:
    """OpenAI's words for a JSON type in its `invalid_type` texts [OBS "but got a decimal
    number instead." quoted by clients for `reasoning.effort`; 3P: the probes table]."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else "a string"


def openai_text(v: Violation) -> Rejection:
    i = v.index
    if v.kind == "orphan_tool":  # [OBS] incl. OpenAI's misspelling and the odd "messages.[i]" path
        return rejections.openai("Invalid parameter: messages with role 'tool' must be a response to "
                                 "a preceeding message with 'tool_calls'.", param=f"messages.[{i}].role")
    if v.kind == "missing_responses":  # [OBS] text; param [MEM: no report quotes it]
        return rejections.openai(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(v.ids), param=f"messages.[{i}].role")
    if v.kind in ("orphan_function", "missing_function_response"):
        return _legacy_text(v)
    if v.kind == "unknown_call_id":  # [OBS] text; param as PROTOCOL.md §8.1 says for pairing errors
        return rejections.openai(f"Invalid parameter: 'tool_call_id' of '{v.ids[0]}' not found in "
                                 "'tool_calls' of previous message.", param=f"messages.[{i}].role")
    if v.kind == "arguments_type":  # [OBS] invalid_type text and code
        path = f"messages[{i}].tool_calls[{v.call}].function.arguments"
        return rejections.openai(f"Invalid type for '{path}': expected a string, but got "
                                 f"{type_name(v.value)} instead.", param=path, code="invalid_type")
    if v.kind == "string_too_long":
        # Text and code [OBS] (quoted by clients, e.g. one reading a large file); param [3P]:
        # two OpenAI-compatible fakes' fixtures give `messages[i].content`.
        return rejections.openai(f"Invalid 'messages[{i}].content': string too long. Expected a "
                                 f"string with maximum length {MAX_STRING}, but got a string with "
                                 f"length {v.value} instead.", param=f"messages[{i}].content",
                                 code="string_above_max_length")
    if v.kind in _TOOL_CONTENT_TEXTS:
        return _TOOL_CONTENT_TEXTS[v.kind](v)
    if v.kind == "null_content":  # [OBS] text, param and null code (see `_content_presence`)
        return rejections.openai("Invalid value for 'content': expected a string, got null.",
                                 param=f"messages.[{i}].content")
    if v.kind == "missing_role_field":
        # [OBS] text, param and null code: the tool's id (MadcowD/ell#325) and the function's
        # name (quoted whole by a client's mock of OpenAI, and in clients' notes).
        role, field = v.value
        return rejections.openai(f"Missing parameter '{field}': messages with role '{role}' must "
                                 f"have a '{field}'.", param=f"messages.[{i}].{field}")
    if v.kind == "field_type":  # OpenAI's `invalid_type` family [3P: the probes table]
        path, found = v.value
        return rejections.openai(f"Invalid type for '{path}': expected a string, but got "
                                 f"{type_name(found)} instead.", param=path, code="invalid_type")
    return _openai_shape_text(v)


def _legacy_text(v: Violation) -> Rejection:
    # [MEM] OpenAI's text for the deprecated form is not on record; this follows its `tool`
    # wording. Gateways that turn the form into ids refuse the same lists (WorkflowAI's proxy:
    # a `function` message must follow an assistant call of that name; Gemini: a function
    # response turn must come right after the function call turn).
    if v.kind == "orphan_function":
        return rejections.openai("Invalid parameter: messages with role 'function' must be a "
                                 "response to the preceding message's 'function_call' of the "
                                 "same name.", param=f"messages.[{v.index}].role")
    return rejections.openai("An assistant message with 'function_call' must be followed by a "
                             f"message with role 'function' named '{v.value}'.",
                             param=f"messages.[{v.index}].role")


def _content_type_text(v: Violation) -> Rejection:  # [OBS] text and code
    path = f"messages[{v.index}].content"
    return rejections.openai(f"Invalid type for '{path}': expected one of a string or array of "
                             f"objects, but got {type_name(v.value)} instead.", param=path,
                             code="invalid_type")


def _empty_content_text(v: Violation) -> Rejection:  # OpenAI's `empty_array` family [OBS]
    path = f"messages[{v.index}].content"
    return rejections.openai(f"Invalid '{path}': empty array. Expected an array with minimum length "
                             "1, but got an empty array instead.", param=path, code="empty_array")


def _image_text(v: Violation) -> Rejection:
    # Text [OBS] for roles tool, assistant and system (OpenHands#7700, openai-node#1030, a
    # client's comment quoting the system one), the same pattern assumed for developer [MEM];
    # param and code `invalid_value` [3P: quoted whole in a client's comment for a tool message].
    # Newer models (GPT-5.2) were reported to accept images in tool messages since
    # (openai-openapi#523); the spec still lists text only, so the fake keeps the stricter rule.
    return rejections.openai(f"Invalid 'messages[{v.index}]'. Image URLs are only allowed for "
                             f"messages with role 'user', but this message with role '{v.value}' "
                             "contains an image URL.", param=f"messages[{v.index}]",
                             code="invalid_value")


def _part_type_text(v: Violation) -> Rejection:
    # OpenAI's `invalid_value` family: [OBS] for the user's list (`USER_PART_TYPES`), [MEM] for
    # the text-only roles.
    found, allowed = v.value
    path = f"messages[{v.index}].content[{v.call}].type"
    quoted = [f"'{t}'" for t in allowed]
    supported = " and ".join(quoted) if len(quoted) < 3 else (
        ", ".join(quoted[:-1]) + ", and " + quoted[-1])
    return rejections.openai(f"Invalid value: '{found}'. Supported values are: {supported}.",
                             param=path, code="invalid_value")


def _part_not_object_text(v: Violation) -> Rejection:
    # [OBS] text (microsoft/graphrag#672); param and code as a client's comment quotes the whole
    # body [3P].
    path = f"messages[{v.index}].content[{v.call}]"
    return rejections.openai(f"Invalid type for '{path}': expected an object, but got "
                             f"{type_name(v.value)} instead.", param=path, code="invalid_type")


_TOOL_CONTENT_TEXTS: dict[str, Callable[[Violation], Rejection]] = {
    "part_not_object": _part_not_object_text, "content_type": _content_type_text, "empty_content": _empty_content_text,
    "image_outside_user": _image_text, "part_type": _part_type_text,
}


def _openai_shape_text(v: Violation) -> Rejection:
    """Schema-level problems, in OpenAI's general error families: [OBS] the empty `messages`
    (CopilotKit/CopilotKit#529) and the unknown role (quoted whole through a relay); [3P] the
    rest, as the probes table records them (empty `tool_calls`, missing parameters, wrong
    types)."""
    i = v.index
    if v.kind == "empty":
        return rejections.openai("Invalid 'messages': empty array. Expected an array with minimum "
                                 "length 1, but got an empty array instead.", param="messages",
                                 code="empty_array")
    if v.kind == "empty_tool_calls":
        path = f"messages[{i}].tool_calls"
        return rejections.openai(f"Invalid '{path}': empty array. Expected an array with minimum "
                                 "length 1, but got an empty array instead.", param=path,
                                 code="empty_array")
    if v.kind == "bad_role":
        return rejections.openai(f"Invalid value: '{v.value}'. Supported values are: 'system', "
                                 "'assistant', 'user', 'function', 'tool', and 'developer'.",
                                 param=f"messages[{i}].role", code="invalid_value")
    if v.kind == "missing_param":
        return rejections.openai(f"Missing required parameter: '{v.value}'.", param=v.value,
                                 code="missing_required_parameter")
    if v.kind == "not_array":
        path, found = v.value
        return rejections.openai(f"Invalid type for '{path}': expected an array of objects, but "
                                 f"got {type_name(found)} instead.", param=path,
                                 code="invalid_type")
    return rejections.openai(f"Invalid type for 'messages[{i}]': expected an object, but got "
                             f"{type_name(v.value)} instead.", param=f"messages[{i}]",
                             code="invalid_type")


def deepseek_text(v: Violation) -> Rejection:
    if v.kind in ("orphan_tool", "unknown_call_id"):  # [OBS]
        return rejections.deepseek("Messages with role 'tool' must be a response to a preceding "
                                   "message with 'tool_calls'")
    if v.kind == "missing_responses":  # [OBS]
        return rejections.deepseek(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to "
            "each 'tool_call_id'. (insufficient tool messages following tool_calls message)")
    return openai_text(v)


def mistral_text(v: Violation) -> Rejection:
    if v.kind == "orphan_tool":  # [OBS] text; type and code as for 3230 [MEM]
        return rejections.flat(f"Unexpected role 'tool' after role '{v.value}'", mistral=True,
                               type_="invalid_request_message_order", code="3230")
    if v.kind in ("missing_responses", "unknown_call_id"):  # [OBS]
        return rejections.flat("Not the same number of function calls and responses", mistral=True,
                               type_="invalid_request_error")
    return openai_text(v)


WORDING: dict[str, Callable[[Violation], Rejection]] = {
    "openai": openai_text, "deepseek": deepseek_text, "mistral": mistral_text,
}
