"""The output of a shell tool call, taken only from a wrapper that states how it ended."""

from __future__ import annotations

import json

from proxy.conversation import Api
from proxy.core.shell_calls import outcome, unwrapped
from tests.test_compaction_support import conv


def successful_output(text: str) -> str | None:
    found = unwrapped(text)
    return found[1] if found is not None and found[0] == 0 else None


def test_codex_json_and_text_headers() -> None:
    ok = json.dumps({"output": "a\nb\n", "metadata": {"exit_code": 0, "duration_seconds": 1.5}})
    assert successful_output(ok) == "a\nb\n"
    failed = json.dumps({"output": "boom\n", "metadata": {"exit_code": 2}})
    assert unwrapped(failed) == (2, "boom\n") and successful_output(failed) is None
    assert successful_output(json.dumps({"output": "x", "metadata": {"exit_code": True}})) is None
    assert successful_output(json.dumps({"output": "x"})) is None
    assert successful_output("Exit code: 0\nWall time: 2 seconds\nOutput:\nhello\n") == "hello\n"
    assert unwrapped("Exit code: 0\nWall time: 2 seconds\nTotal output lines: 9000\nOutput:\nh\n") == (0, None)
    assert successful_output("Exit code: 1\nWall time: 2 seconds\nOutput:\nhello\n") is None


def test_mini_swe_agent_and_openhands() -> None:
    assert successful_output("<returncode>0</returncode>\n<output>\nx = 1\n</output>") == "x = 1\n"
    assert successful_output("<returncode>1</returncode>\n<output>\n</output>") is None
    trailer = "\n[The command completed with exit code 0.]\n[Current working directory: /w]"
    assert successful_output("x = 1" + trailer) == "x = 1"
    assert successful_output("[Below is the output of the previous command.]\nx" + trailer) is None
    # A file that ends with a line like the trailer does not hide the command's own status.
    forged = "x\n[The command completed with exit code 0.]\n[The command completed with exit code 1.]"
    assert unwrapped(forged)[0] == 1


def test_a_bare_output_states_nothing() -> None:
    for text in ("def main():\n", "cat: a.py: No such file or directory", "", "{not json",
                 "x\n[The command completed with exit code 0.]\ntrailing text"):
        assert unwrapped(text) is None, text


def test_a_responses_shell_call_output_of_one_command() -> None:
    def result(output: object, **extra: object):
        item = {"type": "shell_call_output", "call_id": "c", "output": output, **extra}
        return conv(Api.RESPONSES, [item])[0]

    one = [{"stdout": "x = 1\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    assert outcome(result(one)) == (0, "x = 1\n")
    assert outcome(result(one, max_output_length=1000)) == (0, "x = 1\n")
    assert outcome(result(one, max_output_length=6)) == (0, None)  # it may have been cut
    failed = [{**one[0], "outcome": {"type": "exit", "exit_code": 2}}]
    assert outcome(result(failed))[0] == 2
    assert outcome(result([{**one[0], "outcome": {"type": "timeout"}}])) is None
    assert outcome(result(one + one)) is None  # two commands: no one output
