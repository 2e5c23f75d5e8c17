"""The fake's check of a tool message's content: a string or a non-empty array of text parts
(PROTOCOL.md §1.1), with OpenAI's texts, checked before the pairing rules; and of the parts
system and developer messages may send (text only, too)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.messages import assistant_calls, tool_result, user
from proxy.testing.rules import check_chat

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def _with_tool_content(content: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [
        user("look"), assistant_calls("c1"),
        {"role": "tool", "tool_call_id": "c1", "content": content}]}


def _error(body: dict[str, Any], dialect: str = "openai") -> dict[str, Any]:
    found = check_chat(body, dialect)
    assert found is not None and found.status == 400
    return found.body["error"]


@pytest.mark.parametrize("content", ["", "plain", [{"type": "text", "text": "a"}],
                                     [{"type": "text", "text": "a"}, {"type": "text", "text": ""}]])
def test_a_string_or_text_parts_are_accepted(content: Any) -> None:
    assert check_chat(_with_tool_content(content)) is None


def test_an_image_part_in_a_tool_message_is_refused_with_openais_text() -> None:
    content = [{"type": "text", "text": "screenshot:"}, IMAGE]
    assert _error(_with_tool_content(content)) == {
        "message": "Invalid 'messages[2]'. Image URLs are only allowed for messages with role "
                   "'user', but this message with role 'tool' contains an image URL.",
        "type": "invalid_request_error", "param": "messages[2]", "code": "invalid_value"}


def test_the_same_image_in_a_user_message_is_accepted() -> None:
    body = _with_tool_content("ok")
    body["messages"].append({"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE]})
    assert check_chat(body) is None


def test_an_empty_array_is_refused() -> None:
    assert _error(_with_tool_content([])) == {
        "message": "Invalid 'messages[2].content': empty array. Expected an array with minimum "
                   "length 1, but got an empty array instead.",
        "type": "invalid_request_error", "param": "messages[2].content", "code": "empty_array"}


@pytest.mark.parametrize(("content", "got"), [({"text": "x"}, "an object"), (7, "an integer"),
                                              (1.5, "a decimal number")])
def test_content_of_another_type_is_refused(content: Any, got: str) -> None:
    assert _error(_with_tool_content(content)) == {
        "message": f"Invalid type for 'messages[2].content': expected one of a string or array "
                   f"of objects, but got {got} instead.",
        "type": "invalid_request_error", "param": "messages[2].content", "code": "invalid_type"}


def test_other_part_types_and_broken_parts_are_refused() -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    found = _error(_with_tool_content([{"type": "text", "text": "a"}, audio]))
    assert found["param"] == "messages[2].content[1].type" and found["code"] == "invalid_value"
    assert _error(_with_tool_content(["bare"]))["param"] == "messages[2].content[0]"
    missing = _error(_with_tool_content([{"type": "text"}]))
    assert missing["message"] == "Missing required parameter: 'messages[2].content[0].text'."
    no_content = {"model": "m", "messages": [user("x"), assistant_calls("c1"),
                                             {"role": "tool", "tool_call_id": "c1"}]}
    assert _error(no_content)["param"] == "messages.[2].content"


def test_content_is_checked_before_pairing_as_a_schema_validator_does() -> None:
    # The orphan tool message comes first, but its neighbour's bad content is what is named.
    body = {"model": "m", "messages": [user("x"), tool_result("c9"), assistant_calls("c1"),
                                       {"role": "tool", "tool_call_id": "c1", "content": []}]}
    assert _error(body)["code"] == "empty_array"


@pytest.mark.parametrize("dialect", ["deepseek-thinking", "mistral", "gemini", "openrouter"])
def test_every_dialect_refuses_an_image_in_a_tool_message(dialect: str) -> None:
    found = check_chat(_with_tool_content([IMAGE]), dialect)
    assert found is not None and found.status == 400


@pytest.mark.parametrize("role", ["system", "developer"])
def test_images_are_for_user_messages_only(role: str) -> None:
    body = {"model": "m", "messages": [{"role": role, "content": [IMAGE]}, user("x")]}
    assert _error(body)["message"] == (
        f"Invalid 'messages[0]'. Image URLs are only allowed for messages with role 'user', but "
        f"this message with role '{role}' contains an image URL.")

