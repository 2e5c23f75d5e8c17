from __future__ import annotations

import orjson
import pytest

from proxy.compaction.overflow import (RetryAction, error_texts, is_context_overflow,
                                       private_state_rejection)


def openai_error(message: str, code: object = None, type_: str = "invalid_request_error",
                 param: object = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def openrouter(raw: object) -> dict:
    return {"error": {"message": "Provider returned error", "code": 400,
                      "metadata": {"raw": orjson.dumps(raw).decode(),
                                   "provider_name": "Anthropic"}}}


ANTHROPIC_TOO_LONG = {"type": "error", "error": {
    "type": "invalid_request_error",
    "message": "prompt is too long: 208656 tokens > 200000 maximum"}, "request_id": "req_011"}

OVERFLOWS = {
    "openai chat": openai_error(
        "This model's maximum context length is 4097 tokens. However, your messages resulted in "
        "4619 tokens. Please reduce the length of the messages.", "context_length_exceeded",
        param="messages"),
    "openai with completion": openai_error(
        "This model's maximum context length is 4097 tokens. However, you requested 4268 tokens "
        "(4012 in the messages, 256 in the completion). Please reduce the length of the messages "
        "or completion."),
    "responses stream error event": {
        "type": "error", "sequence_number": 2, "error": {
            "type": "invalid_request_error", "code": "context_length_exceeded",
            "message": "Your input exceeds the context window of this model. Please adjust your "
                       "input and try again.", "param": "input"}},
    "responses failed event": {"type": "response.failed", "sequence_number": 5, "response": {
        "status": "failed", "error": {"code": "context_length_exceeded",
                                      "message": "Your input exceeds the context window."}}},
    "anthropic": ANTHROPIC_TOO_LONG,
    "anthropic with max_tokens": {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, "
                   "decrease input length or `max_tokens` and try again"}},
    "bedrock": {"message": "The model returned the following errors: prompt is too long: "
                           "200049 tokens > 200000 maximum"},
    "vllm": openai_error("This model's maximum context length is 32768 tokens. However, your "
                         "request has 40000 input tokens. Please reduce the length of the input "
                         "messages.", 400, "BadRequestError"),
    "vllm older": openai_error(
        "This model's maximum context length is 16384 tokens. However, you requested 122946 "
        "tokens (112946 in the messages, 10000 in the completion). Please reduce the length of "
        "the messages or completion.", 400, "BadRequestError"),
    "llama.cpp": {"error": {"code": 400, "message": "request (5274 tokens) exceeds the available "
                            "context size (4096 tokens), try increasing it",
                            "type": "exceed_context_size_error", "n_prompt_tokens": 5274,
                            "n_ctx": 4096}},
    "llama.cpp older": openai_error("the request exceeds the available context size, try "
                                    "increasing the context size or enable context shift"),
    "ollama nested": {"error": orjson.dumps({"error": {
        "code": 400, "message": "request (9177 tokens) exceeds the available context size "
        "(4096 tokens), try increasing it", "type": "exceed_context_size_error"}}).decode()},
    "openrouter": {"error": {"message": "This endpoint's maximum context length is 32768 tokens. "
                             "However, you requested about 42832 tokens (42832 of text input). "
                             "Please reduce the length of either one, or use the \"middle-out\" "
                             "transform to compress your prompt automatically.", "code": 400}},
    "openrouter wrapped anthropic": openrouter(ANTHROPIC_TOO_LONG),
    "gemini array": [{"error": {"code": 400, "message": "The input token count (1200293) "
                                "exceeds the maximum number of tokens allowed (1048576).",
                                "status": "INVALID_ARGUMENT"}}],
    "deepseek": openai_error("This model's maximum context length is 65536 tokens. However, you "
                             "requested 70000 tokens (70000 in the messages, 0 in the "
                             "completion). Please reduce the length of the messages or "
                             "completion.", "invalid_request_error"),
    "mistral": {"object": "error", "message": "Prompt contains 10000 tokens and 0 draft tokens, "
                "too large for model with 8192 maximum context length",
                "type": "invalid_request_error", "param": None, "code": None},
    "groq": openai_error("Please reduce the length of the messages or completion.",
                         "context_length_exceeded", param="messages"),
    "cerebras": openai_error("Please reduce the length of the messages or completion. Current "
                             "length is 42328 while limit is 40000"),
    "cerebras pair only": openai_error("Current length is 42328 while limit is 40000"),
    "xai": openai_error("This model's maximum prompt length is 131072 but the request contains "
                        "150000 tokens."),
    "moonshot": openai_error("Invalid request: Your request exceeded model token limit: 8192"),
    "lm studio": openai_error("Trying to keep the first 6269 tokens when context the overflows. "
                              "However, the model is loaded with context length of only 4096 "
                              "tokens, which is not enough. Try to load the model with a larger "
                              "context length, or provide a shorter input"),
    "litellm": {"error": {"message": "litellm.ContextWindowExceededError: litellm.BadRequestError"
                          ": Hosted_vllmException - too long", "type": None, "param": None,
                          "code": "400"}},
    "vllm max_tokens too large": openai_error(
        "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum "
        "context length is 4096 tokens and your request has 3500 input tokens "
        "(1000 > 4096 - 3500).", 400, "BadRequestError"),
}

NOT_OVERFLOWS = {
    "string too long": (400, openai_error(
        "Invalid 'messages[3].content': string too long. Expected a string with maximum length "
        "1048576, but got a string with length 2097152 instead.", "string_above_max_length",
        param="messages[3].content")),
    "groq 413 tpm": (413, openai_error(
        "Request too large for model `llama3-70b-8192` on tokens per minute (TPM): Limit 6000, "
        "Requested 7000, please reduce your message size and try again.", "rate_limit_exceeded",
        "tokens")),
    "rate limit 429": (429, openai_error("Rate limit reached. Please reduce the length of the "
                                         "messages.", "rate_limit_exceeded")),
    "openai output cap": (400, openai_error(
        "max_tokens is too large: 128000. This model supports at most 16384 completion tokens, "
        "whereas you provided 128000.", None, param="max_tokens")),
    "anthropic output cap": (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: 100000 > 64000, which is the "
        "maximum allowed number of output tokens for claude-sonnet-4-20250514"}}),
    "tool adjacency": (400, openai_error(
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.", param="messages.[3].role")),
    "successful answer mentioning it": (200, {
        "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "This model's maximum context length "
                        "is 4097 tokens; prompt is too long."}}]}),
    "server error": (500, openai_error("The server had an error", None, "server_error")),
    "plain text 502": (502, "Bad Gateway"),
}


@pytest.mark.parametrize("name", sorted(OVERFLOWS))
def test_overflow_detected_in_every_provider_form(name: str) -> None:
    body = OVERFLOWS[name]
    status = 200 if name.startswith("responses") else 400
    assert is_context_overflow(status, orjson.dumps(body)), name
    assert is_context_overflow(status, body), name


@pytest.mark.parametrize("name", sorted(NOT_OVERFLOWS))
def test_not_an_overflow(name: str) -> None:
    status, body = NOT_OVERFLOWS[name]
    raw = body.encode() if isinstance(body, str) else orjson.dumps(body)
    assert not is_context_overflow(status, raw), name


def test_error_texts_reach_inside_strings_and_arrays() -> None:
    texts = error_texts(orjson.dumps(OVERFLOWS["openrouter wrapped anthropic"]))
    assert any("prompt is too long" in t for t in texts)
    assert error_texts(b"not json at all", 500) == ["not json at all"]
    assert error_texts(b"\xff\xfe", 400) != []


PRIVATE = {
    "openai invalid encrypted": (400, openai_error(
        "The encrypted content gAAA...DQ== could not be verified.", "invalid_encrypted_content"),
        RetryAction.STRIP_BLOBS),
    "openai encrypted newer": (400, openai_error(
        "The encrypted content for item rs_0a1816 could not be verified. Reason: Encrypted "
        "content could not be decrypted or parsed."), RetryAction.STRIP_BLOBS),
    "store false reference": (404, openai_error(
        "Item with id 'rs_0496' not found. Items are not persisted when `store` is set to false. "
        "Try again with `store` set to true, or remove this item from your input.", None,
        param="input"), RetryAction.STRIP_BLOBS),
    "reasoning without following item": (400, openai_error(
        "Item 'rs_0c3876fc' of type 'reasoning' was provided without its required following "
        "item.", param="input"), RetryAction.STRIP_BLOBS),
    "fc id without reasoning": (400, openai_error(
        "Item 'fc_0a0385' of type 'function_call' was provided without its required "
        "'reasoning' item: 'rs_0a0385'."), RetryAction.DROP_UNREASONED),
    "anthropic invalid signature": (400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "messages.1.content.0: Invalid `signature` in `thinking` block"}},
        RetryAction.STRIP_BLOBS),
    "anthropic expected thinking": (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": (
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            "`tool_use`. When `thinking` is enabled, a final `assistant` message must start "
            "with a thinking block.")}}, RetryAction.RESTORE_LOOP_BLOBS),
    "anthropic thinking disabled": (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": (
            "messages.1.content.0: When thinking is disabled, an `assistant` message in the "
            "final position cannot contain `thinking`.")}}, RetryAction.STRIP_BLOBS),
    "gemini missing signature": (400, [{"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": "Function call is missing a thought_signature in functionCall parts. This is "
                   "required for tools to work correctly."}}], RetryAction.SIGNATURE_STAND_INS),
    "gemini invalid signature": (400, [{"error": {"code": 400, "status": "INVALID_ARGUMENT",
        "message": "Corrupted thought signature."}}], RetryAction.STAND_IN),
    "deepseek must pass back": (400, openai_error(
        "The `reasoning_content` in the thinking mode must be passed back to the API.",
        "invalid_request_error"), RetryAction.REASONING_PLACEHOLDERS),
    "deepseek missing field": (400, openai_error(
        "Missing `reasoning_content` field in the assistant message at message index 2"),
        RetryAction.REASONING_PLACEHOLDERS),
    "kimi via openrouter": (400, openrouter(openai_error(
        "thinking is enabled but reasoning_content is missing in assistant tool call message "
        "at index 2")), RetryAction.REASONING_PLACEHOLDERS),
    "cerebras unsupported": (400, {
        "message": "messages.2.assistant.reasoning_content: property "
                   "'messages.2.assistant.reasoning_content' is unsupported",
        "type": "invalid_request_error", "param": "validation_error",
        "code": "wrong_api_format"}, RetryAction.DROP_PLAIN_REASONING),
    "openai strict additional property": (400, openai_error(
        "Additional properties are not allowed ('reasoning_content' was unexpected) - "
        "'messages.3'"), RetryAction.DROP_PLAIN_REASONING),
    "openai strict litellm fields": (400, openai_error(
        "Additional properties are not allowed ('provider_specific_fields', 'reasoning_content', "
        "'reasoning_items', 'thinking_blocks' were unexpected) - 'messages.1'"),
        RetryAction.DROP_PLAIN_REASONING),
    "openai strict two fields": (400, openai_error(
        "Additional properties are not allowed ('reasoning_content', 'thinking_blocks' were "
        "unexpected) - 'messages.1'"), RetryAction.DROP_PLAIN_REASONING),
    "openai strict vllm reasoning": (400, openai_error(
        "Additional properties are not allowed ('reasoning' was unexpected) - 'messages.1'"),
        RetryAction.DROP_PLAIN_REASONING),
    "cerebras unsupported details": (400, {
        "message": "messages.1.assistant.reasoning_details: property "
                   "'messages.1.assistant.reasoning_details' is unsupported",
        "type": "invalid_request_error", "param": "validation_error",
        "code": "wrong_api_format"}, RetryAction.DROP_PLAIN_REASONING),
    # As DeepSeek sends it (public reports quote the body whole); the fake sends the same.
    "deepseek r1 legacy": (400, {
        "message": "The reasoning_content is an intermediate result for display purposes only "
                   "and will not be included in the context for inference. Please remove the "
                   "reasoning_content from your message to reduce network traffic.",
        "type": "invalid_request_error", "param": None, "code": "invalid_request_error"},
        RetryAction.DROP_PLAIN_REASONING),
}


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_private_state_rejection_maps_to_a_retry(name: str) -> None:
    status, body, action = PRIVATE[name]
    retry = private_state_rejection(status, orjson.dumps(body))
    assert retry is not None and retry.action is action, name
    assert retry.reason


@pytest.mark.parametrize("keys", ["'id'", "'parsed', 'refusal'", "'id', 'reasoning_content'"])
def test_unexpected_keys_that_are_not_all_private_get_no_retry(keys: str) -> None:
    """Stripping the reasoning fields cannot make a request with another unexpected key pass."""
    verb = "was" if "," not in keys else "were"
    body = openai_error(f"Additional properties are not allowed ({keys} {verb} unexpected) - "
                        "'messages.1'")
    assert private_state_rejection(400, orjson.dumps(body)) is None


def test_private_state_rejection_ignores_other_errors() -> None:
    assert private_state_rejection(400, orjson.dumps(OVERFLOWS["openai chat"])) is None
    assert private_state_rejection(429, orjson.dumps(PRIVATE["openai invalid encrypted"][1])) \
        is None
    ok = {"choices": [{"message": {"content": "invalid_encrypted_content"}}]}
    assert private_state_rejection(200, orjson.dumps(ok)) is None
    event = {"type": "error", "error": {"code": "invalid_encrypted_content", "message": "x"}}
    retry = private_state_rejection(200, orjson.dumps(event))
    assert retry is not None and retry.action is RetryAction.STRIP_BLOBS


def test_a_refusal_quoting_a_huge_client_value_is_read_only_at_its_start() -> None:
    # An upstream that quotes the client's value back ("Invalid value: '...'") gave the
    # patterns here a client-sized text; one of them rescans the rest of it at each of its
    # openings, so a 200 KB value held the event loop for 9 s (a security audit).
    from proxy.compaction.overflow import _TEXT_READ, _error_strings
    value = "additional properties are not allowed (" * 20_000
    body = orjson.dumps({"error": {"message": f"Invalid value: '{value}'", "param": value,
                                   "type": "invalid_request_error"}})
    texts = _error_strings(body, 400)
    assert texts and all(len(text) <= _TEXT_READ for text in texts)
    assert texts[0].startswith("Invalid value: 'additional properties")
    assert private_state_rejection(400, body) is None
