"""The file a shell call prints, named against the call's own working directory: Codex resolves
a relative `workdir` against its session's directory (openai/codex, `exec_command.rs`:
`cwd().join(workdir)`), Gemini CLI a relative `dir_path` against its project's root
(google-gemini/gemini-cli, `tools/shell.ts`), as a relative operand is resolved."""

from __future__ import annotations

import json

from proxy.conversation import ToolCall
from proxy.core.shell_calls import call_file_read


def _call(name: str, args: dict) -> ToolCall:
    return ToolCall(id="a", name=name, arguments=json.dumps(args))


def test_an_absolute_directory_makes_the_path_absolute() -> None:
    found = call_file_read(_call("exec_command", {"cmd": "cat src/a.py", "workdir": "/repo"}))
    assert found is not None and found.path == "/repo/src/a.py" and "src/a.py" in found.names


def test_a_relative_directory_is_part_of_the_path() -> None:
    found = call_file_read(_call("exec_command", {"cmd": "cat a.py", "workdir": "pkg/sub"}))
    assert found is not None and found.path == "pkg/sub/a.py" and "a.py" in found.names
    found = call_file_read(_call("run_shell_command", {"command": "cat a.py", "dir_path": "pkg"}))
    assert found is not None and found.path == "pkg/a.py"
    found = call_file_read(_call("shell", {"command": ["cat", "a.py"], "workdir": "."}))
    assert found is not None and found.path == "a.py"


def test_a_directory_whose_place_the_call_does_not_say_gives_no_file() -> None:
    assert call_file_read(_call("exec_command", {"cmd": "cat a.py", "workdir": "~/src"})) is None
    assert call_file_read(_call("exec_command", {"cmd": "cat a.py", "workdir": "$HOME"})) is None
