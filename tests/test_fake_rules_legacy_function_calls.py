"""The fake's check of the deprecated single-call form (PROTOCOL.md §1.1): a `role: "function"`
message answers the `function_call` of the assistant message right before it, named alike, and
such a call is answered by the next message. The form has no ids, so position is the pairing;
gateways that translate it to tool ids (Anthropic, Gemini) refuse a result that is not right
after its call, so the fake does too, and a proxy that moves either shows up in the tests."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.rules import check_chat


def _call(name: str = "read_file") -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "function_call": {"name": name, "arguments": '{"path": "a.py"}'}}


def _result(name: str = "read_file") -> dict[str, Any]:
    return {"role": "function", "name": name, "content": "print(1)"}


USER = {"role": "user", "content": "look"}
DONE = {"role": "assistant", "content": "done"}


def _error(*messages: dict[str, Any], dialect: str = "openai") -> dict[str, Any] | None:
    found = check_chat({"model": "gpt-4o", "messages": list(messages)}, dialect)
    return None if found is None else found.body["error"]


def test_a_call_answered_right_after_is_accepted() -> None:
    assert _error(USER, _call(), _result(), _call("grep"), _result("grep"), DONE) is None


@pytest.mark.parametrize("messages", [
    (USER, _result(), DONE),  # no call at all
    (USER, _call(), DONE, _result()),  # the result moved away from its call
    (USER, _call(), _result("grep"), DONE),  # answered under another function's name
    (USER, _call(), _result(), _result(), DONE),  # answered twice
])
def test_a_function_message_not_right_after_its_call_is_refused(messages: tuple) -> None:
    error = _error(*messages)
    assert error is not None and "role 'function'" in error["message"]
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("messages", [(USER, _call(), DONE), (USER, _call())])
def test_a_legacy_call_left_unanswered_is_refused(messages: tuple) -> None:
    error = _error(*messages)
    assert error is not None and "'function_call'" in error["message"]
    assert error["param"] == "messages.[1].role"


def test_vllm_checks_no_pairing() -> None:
    assert _error(USER, _call(), DONE, _result(), dialect="vllm") is None
