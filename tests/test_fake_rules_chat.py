"""The fake upstream's chat rules: every rule, every dialect, with the providers' exact texts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.testing.messages import (
    assistant,
    assistant_calls,
    system,
    tool_call,
    tool_result,
    user,
)
from proxy.testing.rules import DIALECTS, Rejection, check_chat
from proxy.testing.signing import DEFAULT_SIGNER, Signer


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages)}


def error(rejection: Rejection | None) -> dict[str, Any]:
    assert rejection is not None
    assert rejection.status == 400
    return rejection.body["error"]


VALID = body(system("s"), user("hi"), assistant_calls("c1", "c2"), tool_result("c2"),
             tool_result("c1"), assistant("done"), user("next"))


@pytest.mark.parametrize("dialect", ["openai", "openai-strict", "cerebras", "mistral", "openrouter",
                                     "vllm", "deepseek-r1-legacy"])
def test_valid_conversation_passes_every_dialect_without_private_state(dialect: str) -> None:
    assert check_chat(VALID, dialect) is None


def test_unknown_dialect_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        check_chat(VALID, "klingon")


# ---------------------------------------------------------------- OpenAI pairing rules

def test_tool_message_without_preceding_tool_calls_has_openai_misspelled_text() -> None:
    assert error(check_chat(body(user("hi"), tool_result("c1")))) == {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                   "message with 'tool_calls'.",
        "type": "invalid_request_error", "param": "messages.[1].role", "code": None}


def test_tool_message_after_user_that_follows_answered_calls_is_orphan() -> None:
    found = check_chat(body(user("hi"), assistant_calls("c1"), tool_result("c1"), user("x"),
                            tool_result("c1")))
    assert error(found)["param"] == "messages.[4].role"


def test_unanswered_call_names_every_missing_id() -> None:
    found = error(check_chat(body(user("hi"), assistant_calls("c1", "c2", "c3"), tool_result("c2"),
                                  user("next"))))
    assert found["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        "'tool_call_id'. The following tool_call_ids did not have response messages: c1, c3")
    assert found["param"] == "messages.[1].role"


def test_calls_left_unanswered_at_the_end_are_rejected() -> None:
    found = error(check_chat(body(user("hi"), assistant_calls("c1"))))
    assert found["message"].endswith("did not have response messages: c1")


def test_unknown_tool_call_id_in_the_run() -> None:
    found = error(check_chat(body(user("hi"), assistant_calls("c1"), tool_result("c1"),
                                  tool_result("zz"))))
    assert found == {"message": "Invalid parameter: 'tool_call_id' of 'zz' not found in 'tool_calls' "
                                "of previous message.", "type": "invalid_request_error",
                     "param": "messages.[3].role", "code": None}


def test_order_inside_the_tool_run_is_free() -> None:
    assert check_chat(body(user("hi"), assistant_calls("a", "b", "c"), tool_result("c"),
                           tool_result("a"), tool_result("b"))) is None


def test_arguments_must_be_a_string_with_openai_invalid_type_text() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    assert error(check_chat(body(user("hi"), assistant_calls(call), tool_result("c1")))) == {
        "message": "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a "
                   "string, but got an object instead.",
        "type": "invalid_request_error", "param": "messages[1].tool_calls[0].function.arguments",
        "code": "invalid_type"}


BROKEN_ARGUMENTS = ['{"a": ', "", "{'a': 1}", '{"a": 1} trailing']


@pytest.mark.parametrize("arguments", BROKEN_ARGUMENTS)
def test_openai_accepts_arguments_that_are_not_json(arguments: str) -> None:
    # PROTOCOL §1.1: the model "does not always generate valid JSON"; no rejection is recorded.
    call = tool_call("c1", "f", arguments)
    assert check_chat(body(user("hi"), assistant_calls(call), tool_result("c1"))) is None


@pytest.mark.parametrize("arguments", BROKEN_ARGUMENTS)
def test_vllm_rejects_arguments_that_are_not_json_in_the_fakes_own_words(arguments: str) -> None:
    call = tool_call("c1", "f", arguments)
    assert error(check_chat(body(user("hi"), assistant_calls(call), tool_result("c1")), "vllm")) == {
        "message": "Fake upstream's own wording (no provider text is documented): "
                   "'messages[1].tool_calls[0].function.arguments' is not valid JSON.",
        "type": "BadRequestError", "param": None, "code": 400}


def test_vllm_accepts_json_that_only_the_rfc_allows() -> None:
    lone_surrogate = tool_call("c1", "f", '{"text": "\\ud800 and \\udfff"}')
    sent = body(user("hi"), assistant_calls(lone_surrogate), tool_result("c1"))
    assert check_chat(sent, "vllm") is None


def test_vllm_leaves_pairing_to_the_chat_template() -> None:
    # PROTOCOL §2.1: vLLM does no API-level adjacency validation.
    assert check_chat(body(user("hi"), tool_result("c1")), "vllm") is None
    assert check_chat(body(user("hi"), assistant_calls("c1")), "vllm") is None


def test_custom_tool_input_is_free_form() -> None:
    call = {"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}
    assert check_chat(body(user("hi"), assistant_calls(call), tool_result("c1"))) is None


def test_assistant_needs_content_or_tool_calls() -> None:
    # Absent or null, the same answer [3P: direct-API probes; OBS for null, openai-cookbook#503].
    for message in ({"role": "assistant"}, assistant(None)):
        assert error(check_chat(body(user("hi"), message))) == {
            "message": "Invalid value for 'content': expected a string, got null.",
            "type": "invalid_request_error", "param": "messages.[1].content", "code": None}
    assert check_chat(body(user("hi"), assistant(""))) is None


def test_empty_tool_calls_array_is_rejected() -> None:
    found = error(check_chat(body(user("hi"), assistant("x", tool_calls=[]))))
    assert found["code"] == "empty_array"


def test_one_string_over_a_mebibyte_is_string_above_max_length() -> None:
    at_limit = "x" * 1_048_576
    assert check_chat(body(system("s"), user(at_limit))) is None
    found = check_chat(body(system("s"), user("hi"), assistant("ok"), user(at_limit + "yy")))
    assert error(found) == {
        "message": "Invalid 'messages[3].content': string too long. Expected a string with maximum "
                   "length 1048576, but got a string with length 1048578 instead.",
        "type": "invalid_request_error", "param": "messages[3].content",
        "code": "string_above_max_length"}


def test_schema_problems() -> None:
    assert error(check_chat({"model": "m", "messages": []}))["code"] == "empty_array"
    assert error(check_chat({"model": "m"}))["message"] == "Missing required parameter: 'messages'."
    assert error(check_chat(body({"role": "robot", "content": "x"})))["code"] == "invalid_value"


def test_a_tool_message_without_its_id_is_refused_with_openais_text() -> None:
    # MadcowD/ell#325 quotes OpenAI's whole answer.
    assert error(check_chat(body(user("hi"), assistant_calls("c1"),
                                 {"role": "tool", "content": "x"}))) == {
        "message": "Missing parameter 'tool_call_id': messages with role 'tool' must have a "
                   "'tool_call_id'.",
        "type": "invalid_request_error", "param": "messages.[2].tool_call_id", "code": None}
    assert error(check_chat(body(user("hi"), assistant_calls("c1"),
                                 {"role": "tool", "tool_call_id": 7, "content": "x"}))) == {
        "message": "Invalid type for 'messages[2].tool_call_id': expected a string, but got an "
                   "integer instead.",
        "type": "invalid_request_error", "param": "messages[2].tool_call_id", "code": "invalid_type"}


@pytest.mark.parametrize(("messages", "path", "got"), [
    ("ping", "messages", "a string"),
    (None, "messages", "null"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "x"}],
     "messages[1].tool_calls", "a string"),
])
def test_a_list_of_another_type_is_refused(messages: Any, path: str, got: str) -> None:
    assert error(check_chat({"model": "m", "messages": messages})) == {
        "message": f"Invalid type for '{path}': expected an array of objects, but got {got} "
                   "instead.",
        "type": "invalid_request_error", "param": path, "code": "invalid_type"}


# ---------------------------------------------------------------- dialects

def test_openai_is_lenient_about_unknown_message_keys() -> None:
    messages = body(user("hi"), assistant_calls("c1", reasoning_content="r", id="x"), tool_result("c1"))
    assert check_chat(messages, "openai") is None


def test_openai_strict_rejects_additional_properties() -> None:
    messages = body(user("hi"), assistant_calls("c1", reasoning_content="r"), tool_result("c1"))
    assert error(check_chat(messages, "openai-strict")) == {
        "message": "Additional properties are not allowed ('reasoning_content' was unexpected) - "
                   "'messages.1'", "type": "invalid_request_error", "param": None, "code": None}
    two = body(user("hi"), assistant("x", refusal=None, parsed=None))
    assert error(check_chat(two, "openai-strict"))["message"] == (
        "Additional properties are not allowed ('parsed' was unexpected) - 'messages.1'")
    call = {**tool_call("c1"), "extra_content": {}}
    three = body(user("hi"), assistant_calls(call), tool_result("c1"))
    assert error(check_chat(three, "openai-strict"))["message"].endswith("- 'messages.1.tool_calls.0'")


def test_cerebras_rejects_reasoning_content() -> None:
    messages = body(system("s"), user("hi"), assistant("x", reasoning_content="r"))
    found = check_chat(messages, "cerebras")
    assert found == Rejection(400, {
        "message": "messages.2.assistant.reasoning_content: property "
                   "'messages.2.assistant.reasoning_content' is unsupported",
        "type": "invalid_request_error", "param": "validation_error", "code": "wrong_api_format"})
    assert check_chat(body(user("hi"), assistant("x", reasoning="r")), "cerebras") is None


def test_deepseek_r1_legacy_rejects_any_reasoning_content_in_deepseeks_observed_words() -> None:
    messages = body(system("s"), user("hi"), assistant("x", reasoning_content=""), user("more"))
    assert check_chat(messages, "deepseek-r1-legacy") == Rejection(400, {"error": {
        "message": "The reasoning_content is an intermediate result for display purposes only "
                   "and will not be included in the context for inference. Please remove the "
                   "reasoning_content from your message to reduce network traffic.",
        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}})
    assert check_chat(body(user("hi"), assistant("x", reasoning="r")), "deepseek-r1-legacy") is None
    assert error(check_chat(body(user("hi"), tool_result("c1")), "deepseek-r1-legacy"))["message"] \
        .startswith("Messages with role 'tool' must be a response to a preceding message")


DEEPSEEK_TEXT = "The `reasoning_content` in the thinking mode must be passed back to the API."


def test_deepseek_thinking_requires_reasoning_on_current_turn_calls() -> None:
    current = body(user("hi"), assistant_calls("c1"), tool_result("c1"))
    assert check_chat(current, "deepseek-thinking") == Rejection(400, {"error": {
        "message": DEEPSEEK_TEXT, "type": "invalid_request_error", "param": None,
        "code": "invalid_request_error"}})
    with_reasoning = body(user("hi"), assistant_calls("c1", reasoning_content=""), tool_result("c1"))
    assert check_chat(with_reasoning, "deepseek-thinking") is None


def test_deepseek_thinking_wants_earlier_turns_tool_call_reasoning_too() -> None:
    earlier = body(user("hi"), assistant_calls("c1"), tool_result("c1"), assistant("ok"), user("more"))
    found = error(check_chat(earlier, "deepseek-thinking"))
    assert found["message"] == "The `reasoning_content` in the thinking mode must be passed back to the API."
    sent_back = body(user("hi"), assistant_calls("c1", reasoning_content="r"), tool_result("c1"),
                     assistant("ok"), user("more"))
    assert check_chat(sent_back, "deepseek-thinking") is None


def test_deepseek_uses_its_own_pairing_texts() -> None:
    orphan = error(check_chat(body(user("hi"), tool_result("c1")), "deepseek-thinking"))
    assert orphan["message"] == ("Messages with role 'tool' must be a response to a preceding message "
                                 "with 'tool_calls'")
    missing = error(check_chat(body(user("hi"), assistant_calls("c1", reasoning_content="r")),
                               "deepseek-thinking"))
    assert missing["message"].endswith("(insufficient tool messages following tool_calls message)")


def _signed_call(call_id: str, signature: str) -> dict[str, Any]:
    return {**tool_call(call_id, "Bash"), "extra_content": {"google": {"thought_signature": signature}}}


def test_gemini_requires_a_signature_on_the_first_current_call() -> None:
    found = check_chat(body(system("s"), user("hi"), assistant_calls(tool_call("c1", "Bash")),
                            tool_result("c1")), "gemini")
    assert found is not None and found.status == 400
    assert found.body == [{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": (
        "Function call is missing a thought_signature in functionCall parts. This is required for "
        "tools to work correctly, and missing thought_signature may lead to degraded model "
        "performance. Additional data, function call `default_api:Bash`, position 2. Please refer "
        "to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")}}]


def test_gemini_accepts_issued_and_bypass_signatures_only_on_the_first_call() -> None:
    issued = DEFAULT_SIGNER.thought_signature(b"nonce-123456")
    for signature in (issued, "skip_thought_signature_validator"):
        calls = assistant_calls(_signed_call("c1", signature), tool_call("c2"))
        assert check_chat(body(user("hi"), calls, tool_result("c1"), tool_result("c2")), "gemini") is None


def test_gemini_rejects_a_signature_it_did_not_issue() -> None:
    foreign = Signer(b"another key").thought_signature(b"nonce-123456")
    for signature in (foreign, "garbage", DEFAULT_SIGNER.thought_signature(b"n")[:-4] + "AAAA"):
        calls = assistant_calls(_signed_call("c1", signature))
        found = check_chat(body(user("hi"), calls, tool_result("c1")), "gemini")
        assert found is not None and found.body[0]["error"]["message"] == "Corrupted thought signature."


def test_gemini_does_not_require_signatures_before_the_latest_user_message() -> None:
    old = body(user("hi"), assistant_calls("c1"), tool_result("c1"), assistant("ok"), user("next"))
    assert check_chat(old, "gemini") is None


def test_mistral_rejects_user_right_after_tool() -> None:
    messages = body(user("hi"), assistant_calls("c1"), tool_result("c1"), user("next"))
    assert check_chat(messages, "mistral") == Rejection(400, {
        "object": "error", "message": "Unexpected role 'user' after role 'tool'",
        "type": "invalid_request_message_order", "param": None, "code": "3230"})


def test_mistral_rejects_a_system_message_right_after_tool_too() -> None:
    # mistral-common's order rule: after a tool message only assistant or tool messages.
    messages = body(user("hi"), assistant_calls("c1"), tool_result("c1"), system("note"))
    assert check_chat(messages, "mistral") == Rejection(400, {
        "object": "error", "message": "Unexpected role 'system' after role 'tool'",
        "type": "invalid_request_message_order", "param": None, "code": "3230"})
    answered = body(user("hi"), assistant_calls("c1"), tool_result("c1"), assistant("ok"),
                    system("note"))
    assert check_chat(answered, "mistral") is None


def test_mistral_pairing_texts() -> None:
    found = check_chat(body(user("hi"), assistant_calls("c1", "c2"), tool_result("c1")), "mistral")
    assert found is not None
    assert found.body["message"] == "Not the same number of function calls and responses"
    orphan = check_chat(body(user("hi"), tool_result("c1")), "mistral")
    assert orphan is not None and orphan.body["message"] == "Unexpected role 'tool' after role 'user'"


def _detail(text: str = "thinking") -> dict[str, Any]:
    return DEFAULT_SIGNER.sign_detail({"type": "reasoning.text", "text": text,
                                       "format": "anthropic-claude-v1", "index": 0})


def test_openrouter_accepts_issued_details_and_their_absence_outside_the_loop() -> None:
    round_tripped = orjson.loads(orjson.dumps([_detail()]))
    sent = body(user("hi"), assistant_calls("c1", reasoning_details=round_tripped), tool_result("c1"))
    assert check_chat(sent, "openrouter") is None
    past = body(user("hi"), assistant_calls("c1"), tool_result("c1"), assistant("ok"), user("next"))
    assert check_chat(past, "openrouter") is None
    earlier_step = body(user("hi"), assistant_calls("c1"), tool_result("c1"),
                        assistant_calls("c2", reasoning_details=[_detail()]), tool_result("c2"))
    assert check_chat(earlier_step, "openrouter") is None


ANTHROPIC_MISSING_THINKING = (
    "messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a thinking "
    "block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
    "include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
    "Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking")


@pytest.mark.parametrize("details", [None, [], "absent"])
def test_openrouter_requires_details_on_the_current_loops_last_call(details: Any) -> None:
    extra = {} if details == "absent" else {"reasoning_details": details}
    sent = body(system("s"), user("hi"), assistant_calls("c1", reasoning_details=[_detail()]),
                tool_result("c1"), assistant_calls("c2", **extra), tool_result("c2"))
    found = check_chat(sent, "openrouter")
    assert found is not None and found.status == 400
    assert found.body["error"]["message"] == "Provider returned error"
    raw = orjson.loads(found.body["error"]["metadata"]["raw"])
    assert raw == {"type": "error", "request_id": raw["request_id"], "error": {
        "type": "invalid_request_error",
        "message": ANTHROPIC_MISSING_THINKING.format(index=3, found="tool_use")}}


def test_openrouter_names_a_text_block_that_comes_before_the_calls() -> None:
    sent = body(user("hi"), assistant_calls("c1", content="Let me look."), tool_result("c1"))
    found = check_chat(sent, "openrouter")
    assert found is not None
    raw = orjson.loads(found.body["error"]["metadata"]["raw"])
    assert raw["error"]["message"] == ANTHROPIC_MISSING_THINKING.format(index=1, found="text")


@pytest.mark.parametrize("change", ["text", "signature", "drop_signature", "foreign"])
def test_openrouter_rejects_changed_details(change: str) -> None:
    detail = _detail()
    if change == "text":
        detail["text"] = "edited"
    elif change == "signature":
        detail["signature"] = detail["signature"][:-2] + "xx"
    elif change == "drop_signature":
        del detail["signature"]
    else:
        detail = Signer(b"other").sign_detail({"type": "reasoning.text", "text": "thinking"})
    sent = body(system("s"), user("hi"), assistant_calls("c1", reasoning_details=[detail]),
                tool_result("c1"))
    found = check_chat(sent, "openrouter")
    assert found is not None and found.status == 400
    assert found.body["error"]["message"] == "Provider returned error"
    raw = orjson.loads(found.body["error"]["metadata"]["raw"])
    assert raw["error"]["message"] == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_every_dialect_is_listed() -> None:
    assert set(DIALECTS) == {"openai", "openai-strict", "cerebras", "deepseek-thinking",
                             "deepseek-r1-legacy", "gemini", "kimi-thinking", "mistral", "openrouter",
                             "vllm"}


def test_gemini_words_pairing_errors_as_its_native_api_in_googles_array_envelope() -> None:
    missing = check_chat(body(user("hi"), assistant_calls("c1", "c2"), tool_result("c1"),
                              user("next")), "gemini")
    assert missing == Rejection(400, [{"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": "Please ensure that the number of function response parts is equal to the "
                   "number of function call parts of the function call turn."}}])
    orphan = check_chat(body(user("hi"), tool_result("c1")), "gemini")
    assert orphan is not None and orphan.body[0]["error"]["message"] == (
        "Please ensure that function response turn comes immediately after a function call turn.")
    empty = check_chat({"model": "gemini-2.5-pro", "messages": []}, "gemini")
    assert empty is not None and isinstance(empty.body, list)
    assert empty.body[0]["error"]["status"] == "INVALID_ARGUMENT"


def test_vllm_refuses_a_malformed_list_in_its_own_envelope() -> None:
    found = error(check_chat({"model": "m", "messages": []}, "vllm"))
    assert found["type"] == "BadRequestError" and found["code"] == 400
