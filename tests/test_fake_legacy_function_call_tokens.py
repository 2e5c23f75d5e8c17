"""The fake's prompt-token count reads a legacy `function_call` as the call it is.

The fake's count is the yardstick the proxy's estimate is tested against (and what it checks
limits on): an assistant message whose one call is `function_call: {name, arguments}` costs
what the same call in `tool_calls` costs, not only its role and empty content.
"""

from __future__ import annotations

import json

from proxy.testing.reference_tokens import chat_message_tokens, count_text


def _legacy(name: str, arguments: str) -> dict:
    return {"role": "assistant", "content": None,
            "function_call": {"name": name, "arguments": arguments}}


def _modern(name: str, arguments: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def test_the_fake_counts_a_legacy_calls_name_and_arguments() -> None:
    arguments = json.dumps({"path": "src/app.py", "content": "def main():\n    run()\n" * 100})
    counted = chat_message_tokens(_legacy("write_file", arguments))
    assert counted >= count_text(arguments) + count_text("write_file")
    assert counted == chat_message_tokens(_modern("write_file", arguments))


def test_a_legacy_call_without_arguments_still_costs_its_framing_and_name() -> None:
    bare = {"role": "assistant", "content": None, "function_call": {"name": "list_dir"}}
    assert chat_message_tokens(bare) == chat_message_tokens(_modern("list_dir", ""))
