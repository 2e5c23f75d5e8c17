"""A call that types into a running process is no command line: OpenHands' `execute_bash` and
its agent SDK's `terminal` send `command` to the process's stdin when `is_input` is true
(All-Hands-AI/OpenHands; OpenHands/software-agent-sdk `tools/terminal/definition.py`), and
nothing says that process is a shell."""

from __future__ import annotations

import json

from proxy.conversation import ToolCall
from proxy.core.shell_calls import call_file_read, call_only_reads


def _call(args: dict) -> ToolCall:
    return ToolCall(id="a", name="execute_bash", arguments=json.dumps(args))


def test_input_to_a_running_process_neither_reads_nor_prints_a_file() -> None:
    for flag in (True, "true", "True"):
        typed = _call({"command": "cat a.py", "is_input": flag})
        assert not call_only_reads(typed), flag
        assert call_file_read(typed) is None, flag


def test_a_command_line_still_reads() -> None:
    for flag in (False, "false"):
        call = _call({"command": "cat a.py", "is_input": flag})
        assert call_only_reads(call)
        found = call_file_read(call)
        assert found is not None and found.path == "a.py"
    assert call_only_reads(_call({"command": "ls src"}))
