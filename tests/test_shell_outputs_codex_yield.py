"""Codex `exec_command` answered at its yield deadline (openai/codex codex-rs, unified exec).

Unified exec collects a command's output until the output closes after the process exits, or
until the deadline (`yield_time_ms`, 10,000 ms by default, clamped to 250..30,000 ms); only
then does it ask whether the process has exited. A `cat` that exits just after the deadline is
reported as "Process exited with code 0", with only the output read before it, and the
original token count is of that part alone: nothing in the output shows the cut. A wall time
at the deadline is the sign: such an output is not a file's text.
"""

from __future__ import annotations

import json

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api, ToolCall
from proxy.core.shell_calls import outcome, unwrapped
from proxy.settings import RestoreSettings
from tests.factories import entries_of
from tests.test_compaction_support import assistant_calls, conv, count, tool_result, user

HEAD = "def main():\n    return run()\n"  # what was read before the deadline


def _exec(wall: str, output: str = HEAD) -> str:
    """The tool output as `format_response` writes it (codex-rs `handlers/unified_exec.rs`)."""
    tokens = (len(output.encode()) + 3) // 4  # approx_token_count: of what was collected
    return "\n".join(["Chunk ID: 9e01b4", f"Wall time: {wall} seconds", "Process exited with code 0",
                      f"Original token count: {tokens}", "Output:", output])


def _call(**args: object) -> ToolCall:
    return ToolCall("a", "exec_command", json.dumps({"cmd": "cat src/big.py", **args}))


def _result(text: str):
    return entries_of("chat", [{"role": "tool", "tool_call_id": "a", "content": text}])[0]


def test_an_output_that_came_back_at_the_default_deadline_is_not_taken_as_whole() -> None:
    assert outcome(_result(_exec("10.0003")), _call()) == (0, None)
    assert outcome(_result(_exec("9.9996")), _call()) == (0, None)  # printed to 0.1 ms


def test_an_output_that_came_back_before_the_deadline_is_taken() -> None:
    assert outcome(_result(_exec("0.0113")), _call()) == (0, HEAD)
    assert outcome(_result(_exec("9.5000")), _call()) == (0, HEAD)
    assert outcome(_result(_exec("12.0000")), _call(yield_time_ms=20_000)) == (0, HEAD)


def test_the_deadline_is_clamped_as_codex_clamps_it() -> None:
    assert outcome(_result(_exec("0.2500")), _call(yield_time_ms=10)) == (0, None)  # 250 ms least
    assert outcome(_result(_exec("30.0001")), _call(yield_time_ms=60_000)) == (0, None)  # 30 s most
    assert outcome(_result(_exec("29.0000")), _call(yield_time_ms=60_000)) == (0, HEAD)


def test_without_the_call_the_least_deadline_is_assumed() -> None:
    assert unwrapped(_exec("0.0113")) == (0, HEAD)
    assert unwrapped(_exec("0.2500")) == (0, None)
    assert unwrapped(_exec("1.0000")) == (0, None)
    assert outcome(_result(_exec("1.0000")), ToolCall("b", "write_stdin", '{"session_id": 7}')) == (0, None)


def test_an_unreadable_wall_time_is_not_taken() -> None:
    assert unwrapped(_exec("soon")) == (0, None)
    assert outcome(_result(_exec("1e3")), _call()) == (0, None)


def _restored(wall: str, **args: object):
    call = assistant_calls(("a", "exec_command", {"cmd": "cat src/big.py", "workdir": "/repo", **args}))
    entries = conv(Api.CHAT, [user("go"), call, tool_result("a", _exec(wall)), user("tail")])
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    return collect(entries, cutoff, RestoreSettings(), count)


def test_a_cat_answered_at_its_deadline_is_not_restored() -> None:
    assert _restored("10.0021").file_paths == ()
    assert _restored("2.5000").file_paths == ("/repo/src/big.py",)  # came back before 10 s
    assert _restored("0.4000", yield_time_ms=300).file_paths == ()
