"""A Responses input item without a field its type requires is OpenAI's 400 "Missing required
parameter", naming the field by its path (PROTOCOL.md §6.2, §4.2)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.messages import item_call, item_output, item_user
from proxy.testing.rules import check_responses


def missing(param: str) -> dict[str, Any]:
    return {"message": f"Missing required parameter: '{param}'.", "type": "invalid_request_error",
            "param": param, "code": "missing_required_parameter"}


def without(item: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}


CUSTOM_CALL = {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch",
               "input": "*** Begin Patch"}
CUSTOM_OUTPUT = {"type": "custom_tool_call_output", "call_id": "call_1", "output": "ok"}


@pytest.mark.parametrize(("items", "param"), [
    ([item_user("go"), without(item_call("call_1"), "call_id"), item_output("call_1")],
     "input[1].call_id"),
    ([item_user("go"), without(item_call("call_1"), "name"), item_output("call_1")],
     "input[1].name"),
    ([item_user("go"), without(item_call("call_1"), "arguments"), item_output("call_1")],
     "input[1].arguments"),
    ([item_user("go"), item_call("call_1"), without(item_output("call_1"), "output")],
     "input[2].output"),
    ([item_user("go"), item_call("call_1"), without(item_output("call_1"), "call_id")],
     "input[2].call_id"),
    ([item_user("go"), without(CUSTOM_CALL, "input"), CUSTOM_OUTPUT], "input[1].input"),
    ([item_user("go"), CUSTOM_CALL, without(CUSTOM_OUTPUT, "output")], "input[2].output"),
    ([item_user("go"), {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA"},
      {"type": "message", "role": "assistant", "content": "Hi."}], "input[1].summary"),
])
def test_a_missing_required_field_is_named(items: list[Any], param: str) -> None:
    rejection = check_responses({"model": "gpt-5", "input": items})
    assert rejection is not None and rejection.status == 400
    assert rejection.body == {"error": missing(param)}


def test_complete_items_pass() -> None:
    items = [item_user("go"), item_call("call_1"), item_output("call_1"), CUSTOM_CALL,
             CUSTOM_OUTPUT, {"type": "reasoning", "id": "rs_1", "summary": []},
             {"type": "message", "role": "assistant", "content": "Done."}]
    assert check_responses({"model": "gpt-5", "input": items}) is None
