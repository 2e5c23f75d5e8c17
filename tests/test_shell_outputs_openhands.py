"""OpenHands' `execute_bash` output as its source writes it (All-Hands-AI/OpenHands: the
observation's prefix, content and `[The command completed with exit code N.]` suffix; the
agent SDK's terminal observation): every mark it leaves where the output was cut."""

from __future__ import annotations

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api
from proxy.core.shell_calls import unwrapped
from proxy.settings import RestoreSettings
from tests.test_compaction_support import assistant_calls, conv, count, tool_result, user

TRAILER = ("\n[The command completed with exit code 0.]\n[Current working directory: /workspace]\n"
           "[Python interpreter: /usr/bin/python]\n[Command finished with exit code 0]")


def test_the_uncut_output_is_taken() -> None:
    assert unwrapped("x = 1\ny = 2" + TRAILER) == (0, "x = 1\ny = 2")


def test_each_cut_mark_makes_the_output_cut() -> None:
    cut_outputs = [
        # The observation keeps both ends of a long output (openhands/events/observation/commands.py).
        "x = 1\n[... Command output truncated: removed 20500 characters from the middle ...]\ny = 2",
        # The terminal's history held only the end of the output (openhands/runtime/utils/bash.py).
        "[Previous command outputs are truncated. Showing the last 10256 lines of the output below.]\n"
        "y = 2",
        # The agent SDK's clip of a long observation (openhands-sdk maybe_truncate).
        "x = 1<response clipped><NOTE>Due to the max output limit, only part of the full response "
        "has been shown to you.</NOTE>y = 2",
        "x = 1\n[... Observation truncated due to length ...]\ny = 2",
        "[Below is the output of the previous command.]\ny = 2",
    ]
    for output in cut_outputs:
        assert unwrapped(output + TRAILER) == (0, None), output


def test_a_failed_or_unfinished_command_is_not_a_success() -> None:
    assert unwrapped("boom\n[The command completed with exit code 2.]")[0] == 2
    unfinished = ("partial\n[The command has no new output after 30 seconds. You may wait longer "
                  "to see additional output by sending empty command '', send other commands to "
                  "interact with the current process, or send keys to interrupt/kill the command.]")
    assert unwrapped(unfinished) is None


def test_the_agent_sdks_terminal_tool_is_a_shell_tool_by_default() -> None:
    call = assistant_calls(("a", "terminal", {"command": "cat /workspace/a.py", "is_input": False,
                                              "timeout": None, "reset": False}))
    elements = [user("go"), call, tool_result("a", "x = 1" + TRAILER), user("tail")]
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    assert collect(entries, cutoff, RestoreSettings(), count).file_paths == ("/workspace/a.py",)


def test_a_printed_json_file_is_taken_as_the_command_output_it_is() -> None:
    # `cat package.json`: the output starts as Codex's JSON form does, but is not it.
    package = '{\n  "name": "app",\n  "version": "1.0.0"\n}\n'
    assert unwrapped(package + TRAILER) == (0, package)
    assert unwrapped('{"output": "x", "metadata": {"exit_code": 0}}') == (0, "x")
