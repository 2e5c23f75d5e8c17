"""The fake's check of user, system and developer messages: `content` is required (PROTOCOL.md
§1.1), and a user message's parts are of the types OpenAI lists, with its texts."""

from __future__ import annotations

from typing import Any

import pytest
from openai import AsyncOpenAI, BadRequestError

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.rules import check_chat

USER_PART_TYPES = ("'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'")


def _error(*messages: dict[str, Any], dialect: str = "openai") -> dict[str, Any]:
    found = check_chat({"model": "gpt-4o", "messages": list(messages)}, dialect)
    assert found is not None and found.status == 400
    return found.body["error"]


NULL_CONTENT = "Invalid value for 'content': expected a string, got null."


@pytest.mark.parametrize("role", ["user", "system"])
@pytest.mark.parametrize("message", [{}, {"content": None}])
def test_a_message_without_content_is_refused_as_a_null_content(
        role: str, message: dict[str, Any]) -> None:
    # OpenAI's answer to a null or absent content on these roles (openai/openai-cookbook#503,
    # langchain-ai/langchainjs#4153; the absent field as direct-API probes record it).
    assert _error({"role": "user", "content": "hi"}, {"role": role, **message}) == {
        "message": NULL_CONTENT, "type": "invalid_request_error", "param": "messages.[1].content",
        "code": None}


def test_a_developer_message_without_content_is_refused_in_its_own_words() -> None:
    assert _error({"role": "user", "content": "hi"}, {"role": "developer"}) == {
        "message": "Missing required parameter: 'messages[1].content'.",
        "type": "invalid_request_error", "param": "messages[1].content",
        "code": "missing_required_parameter"}
    assert _error({"role": "user", "content": "hi"}, {"role": "developer", "content": None}) == {
        "message": "Invalid type for 'messages[1].content': expected one of a string or array of "
                   "objects, but got null instead.",
        "type": "invalid_request_error", "param": "messages[1].content", "code": "invalid_type"}


@pytest.mark.parametrize("role", ["user", "system", "developer", "assistant"])
def test_content_of_another_type_is_refused_on_every_role(role: str) -> None:
    assert _error({"role": "user", "content": "hi"}, {"role": role, "content": 7}) == {
        "message": "Invalid type for 'messages[1].content': expected one of a string or array of "
                   "objects, but got an integer instead.",
        "type": "invalid_request_error", "param": "messages[1].content", "code": "invalid_type"}


def test_a_missing_content_loses_to_a_later_schema_fault() -> None:
    found = _error({"role": "user"}, {"role": "robot", "content": "hi"})
    assert found["param"] == "messages[1].role" and found["code"] == "invalid_value"
    found = _error({"role": "user"}, {"role": "user", "content": 7})
    assert found["param"] == "messages[1].content" and found["code"] == "invalid_type"
    assert _error({"role": "user"}, {"role": "user", "content": "hi"})["message"] == NULL_CONTENT


def test_a_null_substitute_does_not_stand_in_for_an_assistants_content() -> None:
    for key in ("refusal", "tool_calls", "function_call", "audio"):
        found = _error({"role": "user", "content": "hi"}, {"role": "assistant", key: None})
        assert found["message"] == NULL_CONTENT and found["param"] == "messages.[1].content"
    assert check_chat({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "refusal": "No."}]}) is None


def test_a_function_message_without_name_is_refused() -> None:
    assert _error({"role": "user", "content": "hi"}, {"role": "function", "content": "21C"}) == {
        "message": "Missing parameter 'name': messages with role 'function' must have a 'name'.",
        "type": "invalid_request_error", "param": "messages.[1].name", "code": None}


@pytest.mark.parametrize("part", [
    {"type": "input_text", "text": "hi"},  # a Responses part sent to chat
    {"type": "thinking", "thinking": "x", "signature": "s"},
    {"type": "tool_result", "tool_use_id": "t", "content": "ok"},
])
def test_a_user_part_of_another_api_is_refused_with_openais_list(part: dict[str, Any]) -> None:
    user = {"role": "user", "content": [{"type": "text", "text": "see:"}, part]}
    assert _error(user) == {
        "message": f"Invalid value: '{part['type']}'. Supported values are: {USER_PART_TYPES}.",
        "type": "invalid_request_error", "param": "messages[0].content[1].type",
        "code": "invalid_value"}


def test_user_parts_of_every_listed_type_are_accepted() -> None:
    parts = [{"type": "text", "text": "a"},
             {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
             {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
             {"type": "file", "file": {"file_id": "file-abc"}}]
    assert check_chat({"model": "gpt-4o", "messages": [{"role": "user", "content": parts}]}) is None


ASSISTANT_THINKING = {"role": "assistant", "content": [
    {"type": "thinking", "thinking": "the user wants a greeting", "signature": "sig"},
    {"type": "text", "text": "Hello."}]}


def test_an_assistant_part_of_another_api_is_refused_by_strict_openai() -> None:
    """[OBS] OpenAI answers an assistant's replayed Anthropic `thinking` (or Gemini
    `functionCall`) part with the same list as a user's."""
    assert _error({"role": "user", "content": "hi"}, ASSISTANT_THINKING,
                  {"role": "user", "content": "again"}, dialect="openai-strict") == {
        "message": f"Invalid value: 'thinking'. Supported values are: {USER_PART_TYPES}.",
        "type": "invalid_request_error", "param": "messages[1].content[0].type",
        "code": "invalid_value"}


def test_assistant_text_and_refusal_parts_pass_and_other_dialects_judge_their_own() -> None:
    parts = {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                              {"type": "refusal", "refusal": "no"}]}
    messages = [{"role": "user", "content": "hi"}, parts, {"role": "user", "content": "x"}]
    assert check_chat({"model": "gpt-4o", "messages": messages}, "openai-strict") is None
    thinking = [{"role": "user", "content": "hi"}, ASSISTANT_THINKING, {"role": "user", "content": "x"}]
    assert check_chat({"model": "m", "messages": thinking}, "vllm") is None


async def test_a_responses_part_sent_to_chat_reaches_the_client_as_a_bad_request() -> None:
    async with FakeUpstream() as fake:
        async with AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as api:
            with pytest.raises(BadRequestError) as refused:
                await api.chat.completions.create(model="gpt-4o", messages=[
                    {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])  # type: ignore[list-item]
    assert refused.value.code == "invalid_value"
    assert refused.value.param == "messages[0].content[0].type"
