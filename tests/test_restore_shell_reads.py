"""Restore after a summary: a shell print of one file, when its wrapper says it succeeded uncut,
is a read of that file; a directory shown by an editor is no file."""

from __future__ import annotations

import json

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api
from proxy.core.exploration import describe
from proxy.settings import RestoreSettings
from tests.test_compaction_support import (assistant_calls, conv, count, r_user, tool_result,
                                           user)

TEXT = "def main():\n    return run()\n"


def _step(call_id: str, name: str, args: dict, result: str) -> list[dict]:
    return [assistant_calls((call_id, name, args)), tool_result(call_id, result)]


def _codex(call_id: str, line: str, output: str = TEXT, code: int = 0) -> list[dict]:
    wrapped = json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 0.2}})
    return _step(call_id, "shell", {"command": ["bash", "-lc", line], "workdir": "/repo"}, wrapped)


def _restored(elements: list[dict], settings: RestoreSettings = RestoreSettings()):
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    return collect(entries, cutoff, settings, count)


def _file_texts(restored) -> str:
    return "\n".join(m["content"] for m in restored.files)


def test_a_codex_cat_of_one_file_is_restored_with_its_own_text() -> None:
    restored = _restored([user("go"), *_codex("a", "cat src/cli.py"), user("tail")])
    assert restored.file_paths == ("/repo/src/cli.py",)
    text = _file_texts(restored)
    assert text.endswith("\n\n" + TEXT) and "exit_code" not in text
    assert "cat src/cli.py" in text  # the header names the command, as it names read_file's range


def test_each_known_wrapper_gives_the_exact_output() -> None:
    wrappers = {
        "codex text": f"Exit code: 0\nWall time: 0.1 seconds\nOutput:\n{TEXT}",
        "mini-swe-agent": f"<returncode>0</returncode>\n<output>\n{TEXT}</output>",
        "openhands": (f"{TEXT}\n[The command completed with exit code 0.]\n"
                      "[Current working directory: /workspace]\n[Command finished with exit code 0]"),
    }
    for name, result in wrappers.items():
        restored = _restored([user("go"), *_step("a", "bash", {"command": "cat a.py"}, result),
                              user("tail")])
        assert restored.file_paths == ("a.py",), name
        assert _file_texts(restored).endswith("\n\n" + TEXT), name


def test_a_line_range_is_restored_like_a_read_file_range() -> None:
    restored = _restored([user("go"), *_codex("a", "sed -n '10,12p' src/cli.py"), user("tail")])
    assert restored.file_paths == ("/repo/src/cli.py",)
    assert "sed -n '10,12p' src/cli.py" in _file_texts(restored)


def test_a_failed_cut_or_unwrapped_print_is_not_restored() -> None:
    cases = [
        _codex("a", "cat a.py", "cat: a.py: No such file or directory\n", code=1),
        _codex("a", "cat a.py", "line\n[... omitted 900 of 1000 lines ...]\nline\n"),
        _step("a", "shell", {"command": ["bash", "-lc", "cat a.py"]},
              f"Exit code: 0\nWall time: 0.1 seconds\nTotal output lines: 4000\nOutput:\n{TEXT}"),
        _step("a", "Bash", {"command": "cat a.py"}, TEXT),  # bare: success unknown
        _step("a", "execute_bash", {"command": "cat a.py"},
              f"{TEXT}\n[The command completed with exit code 1.]"),
        _step("a", "bash", {"command": "cat a.py"},
              "<returncode>0</returncode>\n<warning>\nThe output of your last command was too long.\n"
              "</warning><output_head>\nx\n</output_head>"),
        _codex("a", "cat a.py | head -5"),
        _codex("a", "cat a.py b.py"),
        _codex("a", "cat a.py > b.py"),
    ]
    for elements in cases:
        assert _restored([user("go"), *elements, user("tail")]).file_paths == (), elements[0]


def test_a_later_shell_write_makes_the_read_stale_and_a_later_read_does_not() -> None:
    read = _codex("a", "cat /repo/a.py")
    restored = _restored([user("go"), *read, *_codex("b", "grep -n main /repo/a.py"), user("tail")])
    assert "may be out of date" not in _file_texts(restored)
    restored = _restored([user("go"), *read, *_codex("b", "sed -i 's/main/run/' /repo/a.py"),
                          user("tail")])
    assert "may be out of date" in _file_texts(restored)


def test_an_edit_that_names_the_file_as_the_command_did_makes_it_stale() -> None:
    # Codex reads `src/a.py` in its workdir /repo and patches it by the relative name.
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-old\n+new\n*** End Patch"
    elements = [user("go"), *_codex("a", "cat src/a.py"),
                *_step("b", "apply_patch", {"input": patch}, "Done!"), user("tail")]
    restored = _restored(elements)
    assert restored.file_paths == ("/repo/src/a.py",)
    assert "may be out of date" in _file_texts(restored)


def test_a_shell_read_of_a_path_kept_in_the_tail_is_not_restored() -> None:
    elements = [user("go"), *_codex("a", "cat /repo/a.py"), user("tail"), *_codex("b", "cat a.py")]
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=3, lead=0, start=0, strategy=PARTIAL)
    assert collect(entries, cutoff, RestoreSettings(), count).file_paths == ()


def test_shell_tool_names_are_configurable() -> None:
    elements = [user("go"), *_codex("a", "cat a.py"), user("tail")]
    assert _restored(elements, RestoreSettings(shell_tools=())).file_paths == ()
    assert _restored(elements, RestoreSettings(shell_tools=("sh*",))).file_paths == ("/repo/a.py",)


def test_responses_local_shell_call_output_is_restored() -> None:
    items = [r_user("go"),
             {"type": "local_shell_call", "id": "ls_a", "call_id": "a", "status": "completed",
              "action": {"type": "exec", "command": ["bash", "-lc", "cat a.py"],
                         "working_directory": "/repo"}},
             {"type": "local_shell_call_output", "call_id": "a",
              "output": json.dumps({"output": TEXT, "metadata": {"exit_code": 0}})},
             r_user("tail")]
    entries = conv(Api.RESPONSES, items)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(), count)
    assert restored.file_paths == ("/repo/a.py",)


def test_responses_shell_call_output_is_restored_and_its_fold_says_how_it_ended() -> None:
    def step(call_id: str, line: str, code: int = 0) -> list[dict]:
        return [{"type": "shell_call", "call_id": call_id, "status": "completed",
                 "action": {"commands": [line], "timeout_ms": 1000}},
                {"type": "shell_call_output", "call_id": call_id, "max_output_length": 10000,
                 "output": [{"stdout": TEXT, "stderr": "", "outcome": {"type": "exit", "exit_code": code}}]}]

    items = [r_user("go"), *step("a", "cat a.py"), *step("b", "cat b.py", code=1), r_user("tail")]
    entries = conv(Api.RESPONSES, items)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(), count)
    assert restored.file_paths == ("a.py",)
    assert restored.file_counts[0][0].endswith("\n\n" + TEXT)
    ok, failed = describe(entries[1].calls[0], entries[2]), describe(entries[3].calls[0], entries[4])
    assert "-> ok, 3 lines" in ok and "non-text" not in ok
    assert "-> error," in failed


def test_a_directory_view_is_not_restored_as_a_file() -> None:
    listing = ("Here's the files and directories up to 2 levels deep in /workspace/src, excluding "
               "hidden items:\n/workspace/src\n/workspace/src/a.py\n/workspace/src/b.py\n")
    view = _step("a", "str_replace_editor", {"command": "view", "path": "/workspace/src"}, listing)
    restored = _restored([user("go"), *view, user("tail")])
    assert restored.file_paths == ()
    opencode = _step("b", "read", {"filePath": "/repo/src/"}, "a.py\nb.py\nsub/\n")
    assert _restored([user("go"), *opencode, user("tail")]).file_paths == ()
    tagged = _step("d", "read", {"filePath": "/repo/src"},
                   "<path>/repo/src</path>\n<type>directory</type>\n<entries>\na.py\nsub/\n\n(2 entries)\n</entries>")
    assert _restored([user("go"), *tagged, user("tail")]).file_paths == ()
    opencode_file = _step("e", "read", {"filePath": "/repo/src/a.py"},
                          "<path>/repo/src/a.py</path>\n<type>file</type>\n<content>\n1: x\n</content>")
    assert _restored([user("go"), *opencode_file, user("tail")]).file_paths == ("/repo/src/a.py",)
    # The file the directory holds, viewed afterwards, is still a file.
    view_file = _step("c", "str_replace_editor", {"command": "view", "path": "/workspace/src/a.py"},
                      "Here's the result of running `cat -n` on /workspace/src/a.py:\n     1\tx\n")
    restored = _restored([user("go"), *view, *view_file, user("tail")])
    assert restored.file_paths == ("/workspace/src/a.py",)
