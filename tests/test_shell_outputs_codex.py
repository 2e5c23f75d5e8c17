"""Codex CLI's shell outputs as its source writes them (openai/codex, codex-rs): the JSON and the
text form of `shell` / `shell_command`, the `exec_command` form of unified exec, and every mark
it leaves where it cut the output. The outputs here are written from those format facts."""

from __future__ import annotations

import json

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api
from proxy.core.shell_calls import unwrapped
from proxy.settings import RestoreSettings
from tests.test_compaction_support import assistant_calls, conv, count, tool_result, user

TEXT = "def main():\n    return run()\n"
# approx_token_count in codex-rs: ceil(UTF-8 bytes / 4).
TOKENS = (len(TEXT.encode()) + 3) // 4


def _json(output: str, code: int = 0) -> str:
    return json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 0.1}})


def _exec(output: str = TEXT, *, status: str = "Process exited with code 0",
          tokens: int | None = TOKENS, chunk: bool = True) -> str:
    lines = ["Chunk ID: 5f2a1c"] if chunk else []
    lines += ["Wall time: 0.0113 seconds", status]
    if tokens is not None:
        lines.append(f"Original token count: {tokens}")
    return "\n".join([*lines, "Output:", output])


# ---------------------------------------------------------------- shell: cut marks

def test_a_json_output_cut_by_bytes_or_chars_is_cut() -> None:
    head, tail = "import os\n", "print(1)\n"
    cut_outputs = [
        f"Total output lines: 200\n\n{head}\n[... output truncated to fit 10240 bytes ...]\n\n{tail}",
        f"{head}…3120 chars truncated…{tail}",
        f"Warning: truncated output (original token count: 4100)\nTotal output lines: 80\n\n"
        f"{head}…2600 tokens truncated…{tail}",
    ]
    for output in cut_outputs:
        assert unwrapped(_json(output)) == (0, None), output


def test_a_text_output_cut_inside_one_line_is_cut() -> None:
    # One long line cut in its middle keeps its line count: no `Total output lines` header.
    text = "Exit code: 0\nWall time: 0.2 seconds\nOutput:\nconst a = [1, 2, …900 chars truncated…, 3];"
    assert unwrapped(text) == (0, None)


def test_a_timed_out_command_is_not_a_complete_output() -> None:
    output = "command timed out after 10000 milliseconds\npartial line\n"
    assert unwrapped(_json(output))[1] is None
    assert unwrapped(f"Exit code: 0\nWall time: 10 seconds\nOutput:\n{output}")[1] is None


def test_the_uncut_shapes_still_give_their_output() -> None:
    assert unwrapped(_json(TEXT)) == (0, TEXT)
    assert unwrapped(f"Exit code: 0\nWall time: 0.1 seconds\nOutput:\n{TEXT}") == (0, TEXT)
    assert unwrapped("Exit code: 0\nWall time: 0 seconds\nOutput:\n") == (0, "")


# ---------------------------------------------------------------- exec_command

def test_an_exec_command_that_exited_gives_its_code_and_output() -> None:
    assert unwrapped(_exec()) == (0, TEXT)
    assert unwrapped(_exec(chunk=False)) == (0, TEXT)
    assert unwrapped(_exec(tokens=None)) == (0, TEXT)  # older versions: the count only when cut
    failed = _exec("cat: a.py: No such file or directory\n", status="Process exited with code 1",
                   tokens=10)
    assert unwrapped(failed)[0] == 1


def test_an_exec_command_still_running_or_cut_gives_no_complete_output() -> None:
    assert unwrapped(_exec(status="Process running with session ID 41230")) is None
    cut = "def main():\n…4100 tokens truncated…    return run()\n"
    assert unwrapped(_exec(cut, tokens=4200)) == (0, None)
    # The original count says more was printed than the output shows.
    assert unwrapped(_exec(TEXT, tokens=TOKENS + 50)) == (0, None)


def test_an_exec_command_header_with_an_unknown_line_is_not_taken() -> None:
    odd = "Wall time: 0.0113 seconds\nProcess exited with code 0\nSomething new: 1\nOutput:\n" + TEXT
    assert unwrapped(odd) is None
    # An MCP tool's output has the same wall time line but states no exit.
    assert unwrapped("Wall time: 1.2500 seconds\nOutput:\n[{\"text\":\"done\"}]") is None


def _restored(elements: list[dict]):
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    return collect(entries, cutoff, RestoreSettings(), count)


def test_an_exec_command_cat_is_restored_with_the_file_text() -> None:
    call = assistant_calls(("a", "exec_command", {"cmd": "cat src/cli.py", "workdir": "/repo"}))
    restored = _restored([user("go"), call, tool_result("a", _exec()), user("tail")])
    assert restored.file_paths == ("/repo/src/cli.py",)
    assert restored.file_counts[0][0].endswith("\n\n" + TEXT)
    running = tool_result("a", _exec(status="Process running with session ID 7"))
    assert _restored([user("go"), call, running, user("tail")]).file_paths == ()
