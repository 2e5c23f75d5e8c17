"""Tool names as globs, and tools that read or edit by their `command` argument."""

from __future__ import annotations

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api, content_text
from proxy.core.collapse import collapse, exploration_runs
from proxy.settings import CollapseSettings, CompactionSettings, RestoreSettings
from tests.factories import stage_context
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, tool_result,
                                           user)

EDITOR = "str_replace_editor"


def _step(call_id: str, name: str, args: dict, result: str = "ok") -> list[dict]:
    return [assistant_calls((call_id, name, args)), tool_result(call_id, result)]


def _restored(elements: list[dict], settings: RestoreSettings = RestoreSettings()):
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    return collect(entries, cutoff, settings, count)


def test_an_editor_edit_is_not_a_read_and_makes_the_earlier_read_stale() -> None:
    elements = [user("go"),
                *_step("a", EDITOR, {"command": "view", "path": "a.py"}, "old text of a"),
                *_step("b", EDITOR, {"command": "create", "path": "b.py", "file_text": "new b"}),
                *_step("c", EDITOR, {"command": "str_replace", "path": "a.py",
                                     "old_str": "old", "new_str": "new"}),
                user("tail")]
    restored = _restored(elements)
    assert restored.file_paths == ("a.py",)  # the created b.py was never read
    assert "may be out of date" in restored.files[0]["content"]


def test_an_editor_edit_breaks_an_exploration_run() -> None:
    elements = [user("go"),
                *_step("a", EDITOR, {"command": "view", "path": "a.py"}),
                *_step("b", EDITOR, {"command": "insert", "path": "a.py", "insert_line": 1,
                                     "new_str": "x"}),
                *_step("c", EDITOR, {"command": "view", "path": "a.py"}), user("next")]
    entries = conv(Api.CHAT, elements)
    tools = CollapseSettings().tools
    assert exploration_runs(entries, tools) == []
    assert collapse(entries, stage_context(entries, tail=1)).entries is entries


def test_viewing_the_task_list_does_not_hide_the_plan_it_shows() -> None:
    plan = {"command": "plan", "task_list": [{"id": "1", "title": "fix main", "status": "todo"}]}
    elements = [user("go"), *_step("a", "task_tracker", plan), assistant("planned"),
                user("tail"), *_step("b", "task_tracker", {"command": "view"})]
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=4, lead=0, start=0, strategy=PARTIAL)  # the view stays in the tail
    restored = collect(entries, cutoff, RestoreSettings(), count)
    assert restored.plan and "fix main" in restored.plan[0]["content"]


def test_configured_names_are_case_sensitive_globs() -> None:
    settings = RestoreSettings(file_tools=("mcp__fs__read*",), plan_tools=("*_todos",))
    elements = [user("go"),
                *_step("a", "mcp__fs__read_text_file", {"path": "a.py"}, "text of a"),
                *_step("b", "MCP__FS__READ_TEXT_FILE", {"path": "b.py"}, "text of b"),
                *_step("c", "set_todos", {"todos": ["fix main"]}), user("tail")]
    restored = _restored(elements, settings)
    assert restored.file_paths == ("a.py",)
    assert restored.plan and "fix main" in restored.plan[0]["content"]
    explore = CompactionSettings(collapse=CollapseSettings(tools=("mcp__fs__*",)))
    listing = "".join(f"src/module_{n}.py\n" for n in range(40))  # worth a record
    steps = [user("go"), *_step("a", "mcp__fs__list", {"path": "."}, listing),
             *_step("b", "mcp__fs__search", {"pattern": "x"}, listing),
             *_step("c", "mcp__fs__read_text_file", {"path": "a.py"}), user("next")]
    entries = conv(Api.CHAT, steps)
    out = collapse(entries, stage_context(entries, tail=1, settings=explore))
    assert out.report.changed == 4


def test_a_capitalized_read_lists_no_mentions_from_the_file_text() -> None:
    text = "setup.py:1: a line of the file that looks like a search hit\n" * 20
    steps = [user("go"), *_step("a", "Read", {"file_path": "notes.txt"}, text),
             *_step("b", "Read", {"file_path": "other.txt"}, text),
             *_step("c", "Grep", {"pattern": "x"}, "src/a.py:3:x"), user("next")]
    entries = conv(Api.CHAT, steps)
    record = content_text(collapse(entries, stage_context(entries, tail=1)).entries[1])
    assert '- Read {"file_path":"notes.txt"} -> ok' in record
    assert "mentions" not in record
