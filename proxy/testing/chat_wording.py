"""How each OpenAI-compatible family words a `chat_rules.Violation`: OpenAI's texts, and the
DeepSeek, Mistral and Gemini ones where they differ (PROTOCOL.md §2.1), in each family's
envelope (vLLM's and Gemini's too). Each text says how sure it is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from proxy.testing import rejections
from proxy.testing.chat_rules import MAX_STRING, Violation
from proxy.testing.rejections import Rejection


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
    if v.kind == "missing_responses":
        # [OBS] text; param `messages.[i].role` as a 2026 report quotes it (notebooks from 2024
        # show plain `messages`); that `i` is the assistant message's index is [MEM].
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


def gemini_text(v: Violation) -> Rejection:
    """Gemini's OpenAI-compatible endpoint: every error in Google's array envelope
    (PROTOCOL.md §2.1). The pairing texts are those its native API gives [OBS: quoted whole in
    client reports]; the compatible endpoint is assumed to pass them through [MEM]. Other
    violations keep OpenAI's text, for want of a recorded one."""
    if v.kind in ("missing_responses", "unknown_call_id"):
        return rejections.gemini("Please ensure that the number of function response parts is "
                                 "equal to the number of function call parts of the function "
                                 "call turn.")
    if v.kind == "orphan_tool":
        return rejections.gemini("Please ensure that function response turn comes immediately "
                                 "after a function call turn.")
    return _reworded(openai_text(v), rejections.gemini)


def vllm_text(v: Violation) -> Rejection:
    """vLLM checks no pairing; its schema errors come in its own envelope (PROTOCOL.md §1.4)."""
    return _reworded(openai_text(v), rejections.vllm)


def _reworded(rejection: Rejection, envelope: Callable[[str], Rejection]) -> Rejection:
    return envelope(rejection.body["error"]["message"])


WORDING: dict[str, Callable[[Violation], Rejection]] = {
    "openai": openai_text, "deepseek": deepseek_text, "mistral": mistral_text,
    "gemini": gemini_text, "vllm": vllm_text,
}
