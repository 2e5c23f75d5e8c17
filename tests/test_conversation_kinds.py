"""Each wire element's kind, as `entry_from_chat` and `entry_from_responses` read it: by role
for messages, by type for Responses items; anything unknown (or not an object) is OTHER."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.conversation import (Api, Kind, entry_from, entry_from_chat, entry_from_responses,
                                latest_user_index, leading_instructions, reference_id)


@pytest.mark.parametrize(("message", "kind"), [
    ({"role": "system", "content": "s"}, Kind.INSTRUCTION),
    ({"role": "developer", "content": "d"}, Kind.INSTRUCTION),
    ({"role": "user", "content": "u"}, Kind.USER),
    ({"role": "assistant", "content": "a"}, Kind.ASSISTANT),
    ({"role": "tool", "tool_call_id": "c1", "content": "r"}, Kind.RESULT),
    ({"role": "tool", "content": "no id"}, Kind.OTHER),
    ({"role": "function", "name": "f", "content": "r"}, Kind.OTHER),
    ({"role": ["user"], "content": "u"}, Kind.OTHER),
    ("not an object", Kind.OTHER),
])
def test_chat_kinds(message: Any, kind: Kind) -> None:
    entry = entry_from_chat(message)
    assert entry.kind is kind and entry.api is Api.CHAT
    assert entry_from(Api.CHAT, message).kind is kind


@pytest.mark.parametrize(("item", "kind"), [
    ({"role": "system", "content": "s"}, Kind.INSTRUCTION),
    ({"type": "message", "role": "developer", "content": "d"}, Kind.INSTRUCTION),
    ({"role": "user", "content": "u"}, Kind.USER),
    ({"type": "message", "role": "assistant", "content": []}, Kind.ASSISTANT),
    ({"role": "critic", "content": "?"}, Kind.OTHER),
    ({"type": "reasoning", "id": "rs_1", "summary": []}, Kind.REASONING),
    ({"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}, Kind.CALL),
    ({"type": "function_call_output", "call_id": "c1", "output": "x"}, Kind.RESULT),
    ({"type": "local_shell_call_output", "id": "c2", "output": "x"}, Kind.RESULT),
    ({"type": "item_reference", "id": "msg_1"}, Kind.OTHER),
    (7, Kind.OTHER),
])
def test_responses_kinds(item: Any, kind: Kind) -> None:
    entry = entry_from_responses(item)
    assert entry.kind is kind and entry.api is Api.RESPONSES
    assert entry_from(Api.RESPONSES, item).kind is kind


def test_kind_walks() -> None:
    entries = [entry_from_chat(m) for m in (
        {"role": "system", "content": "s"}, {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"})]
    assert leading_instructions(entries) == 2 and leading_instructions(entries[2:]) == 0
    assert latest_user_index(entries) == 2 and latest_user_index(entries[:2]) is None
    assert reference_id(entry_from_responses({"type": "item_reference", "id": "msg_1"})) == "msg_1"
    assert reference_id(entry_from_chat({"role": "user", "content": "u"})) is None
