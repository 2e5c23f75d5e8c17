"""Collapse folds shell calls whose command line only reads, as Codex CLI, OpenHands and
Claude-Code-style agents explore; a shell call that may write ends the run."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api, content_text
from proxy.core.collapse import _chains, collapse, exploration_runs, tool_sets
from proxy.core.exploration import describe
from proxy.settings import CollapseSettings, CompactionSettings
from tests.factories import stage_context
from tests.test_core_chains_fold import _chains_whole
from tests.test_compaction_support import assistant_calls, conv, r_user, tool_result, user

SETTINGS = CollapseSettings()


def _codex(call_id: str, line: str, output: str = "ok\n", code: int = 0) -> list[dict]:
    args = {"command": ["bash", "-lc", line], "workdir": "/repo"}
    result = json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 0.1}})
    return [assistant_calls((call_id, "shell", args)), tool_result(call_id, result)]


def _openhands(call_id: str, line: str, output: str = "ok") -> list[dict]:
    return [assistant_calls((call_id, "execute_bash", {"command": line})),
            tool_result(call_id, f"{output}\n[The command completed with exit code 0.]")]


def _runs(elements: list[dict], settings: CollapseSettings = SETTINGS) -> list:
    entries = conv(Api.CHAT, elements)
    return exploration_runs(entries, settings.tools, None, settings.shell_tools)


def test_codex_reads_through_its_shell_tool_collapse_keeping_the_commands() -> None:
    elements = [user("find the bug"),
                *_codex("a", "rg -n 'def main' src", "src/cli.py:3:def main():\n"),
                *_codex("b", "sed -n '1,40p' src/cli.py", "import sys\n" * 40),
                *_codex("c", "cat src/util.py", "def helper():\n    pass\n"),
                user("now fix it")]
    entries = conv(Api.CHAT, elements)
    out = collapse(entries, stage_context(entries, tail=1))
    assert out.report.changed == 4  # the first two steps fold, the last stays verbatim
    record = content_text(out.entries[1])
    assert "rg -n 'def main' src" in record and "sed -n '1,40p' src/cli.py" in record
    assert "mentions src/cli.py:3" in record
    assert out.entries[2:] == entries[5:]


def test_a_shell_call_that_may_write_is_no_exploration_step() -> None:
    for line in ("sed -i 's/a/b/' src/cli.py", "cat a.py > b.py", "ls; rm -rf build",
                 "python -m pytest", "cat $(ls)"):
        elements = [user("go"), *_openhands("a", "ls -la"), *_openhands("b", line),
                    *_openhands("c", "cat a.py"), user("next")]
        assert _runs(elements) == [], line


def test_openhands_and_claude_code_shell_reads_form_a_run() -> None:
    elements = [user("go"), *_openhands("a", "cd /workspace && ls -la"),
                *_openhands("b", "grep -rn Subquery django | head -20"),
                *_openhands("c", "cat django/db/models/expressions.py"), user("next")]
    assert len(_runs(elements)) == 1
    bash = [user("go"),
            assistant_calls(("a", "Bash", {"command": "git log --oneline -5"})),
            tool_result("a", "abc123 fix"),
            assistant_calls(("b", "Bash", {"command": "git diff HEAD~1 --stat"})),
            tool_result("b", " a.py | 2 +-"), user("next")]
    assert len(_runs(bash)) == 1


def test_shell_tool_names_are_configurable_globs() -> None:
    elements = [user("go"), *_openhands("a", "ls"), *_openhands("b", "cat a.py"), user("next")]
    assert _runs(elements, CollapseSettings(shell_tools=())) == []
    assert _runs(elements, CollapseSettings(shell_tools=("execute_*",)))
    entries = conv(Api.CHAT, elements)
    explore = CompactionSettings(collapse=CollapseSettings(shell_tools=()))
    assert collapse(entries, stage_context(entries, tail=1, settings=explore)).entries is entries


def test_responses_local_shell_calls_collapse() -> None:
    def step(call_id: str, argv: list[str]) -> list[dict]:
        return [{"type": "local_shell_call", "id": f"ls_{call_id}", "call_id": call_id,
                 "status": "completed",
                 "action": {"type": "exec", "command": argv, "working_directory": "/repo"}},
                {"type": "local_shell_call_output", "call_id": call_id,
                 "output": json.dumps({"output": "x\n", "metadata": {"exit_code": 0}})}]

    items = [r_user("go"), *step("a", ["bash", "-lc", "ls src"]),
             *step("b", ["bash", "-lc", "cat src/a.py"]), *step("c", ["rg", "-n", "x"]),
             r_user("next")]
    entries = conv(Api.RESPONSES, items)
    runs = exploration_runs(entries, SETTINGS.tools, None, SETTINGS.shell_tools)
    assert len(runs) == 1 and len(runs[0].groups) == 3
    written = [*items[:3], *step("w", ["bash", "-lc", "cat a > b"]), *items[3:]]
    entries = conv(Api.RESPONSES, written)
    runs = exploration_runs(entries, SETTINGS.tools, None, SETTINGS.shell_tools)
    assert [len(r.groups) for r in runs] == [2]  # only the reads after the write


def test_the_record_states_a_failed_exit_code_and_no_mentions_for_a_file_print() -> None:
    entries = conv(Api.CHAT, [user("go"), *_codex("a", "cat setup.py", "setup.py:1: text\n", code=1)])
    line = describe(entries[1].calls[0], entries[2])
    assert "-> error," in line and "mentions" not in line
    entries = conv(Api.CHAT, [user("go"), *_openhands("a", "grep -rn x src", "src/a.py:2:x")])
    line = describe(entries[1].calls[0], entries[2])
    assert "-> ok," in line and "mentions src/a.py:2" in line


_READ_LINES = ("cat a.py", "sed -n '1,9p' a.py", "grep -rn x src | head", "ls -la", "git log -3",
               "cd src && rg -n y")
_OTHER_LINES = ("sed -i s/x/y/ a.py", "cat a.py > b.py", "ls; rm -rf b", "python -m pytest",
                "cat $(ls)", "git commit -am x")


@given(st.lists(st.booleans(), min_size=1, max_size=12), st.sampled_from(("execute_bash", "shell")))
def test_runs_hold_exactly_the_maximal_stretches_of_shell_reads(reads: list[bool], tool: str) -> None:
    elements = [user("go")]
    for n, read in enumerate(reads):
        line = (_READ_LINES if read else _OTHER_LINES)[n % 6]
        elements += _codex(f"c{n}", line) if tool == "shell" else _openhands(f"c{n}", line)
    elements.append(user("next"))
    found = [[(g.start - 1) // 2 for g in run.groups] for run in _runs(elements)]
    stretches, current = [], []
    for n, read in enumerate(reads + [False]):
        if read:
            current.append(n)
        elif current:
            stretches.append(current)
            current = []
    assert found == [s for s in stretches if len(s) >= 2]
    # Folding on from a shorter list finds the same runs as folding the whole list.
    entries = conv(Api.CHAT, elements)
    which = tool_sets(SETTINGS.tools, SETTINGS.shell_tools)
    for cut in range(3, len(entries) + 1, 2):
        assert _chains(entries[:cut], which) == _chains_whole(entries[:cut], which)
