"""A legacy call (`function_call` on the assistant message, answered by the `role: "function"`
message right after it) is a one-call tool step for collapse and restore, as a `tool_calls`
step is: a run of legacy reads collapses (SPEC §4.1) and a file read through one comes back
after a summary (SPEC §5). The proxy's own id for such a call never reaches upstream: the
output stays in the legacy form, each result right after its call."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import HEADER, collect
from proxy.conversation import Kind, content_text
from proxy.core.cascade import CascadeContext, run_cascade
from proxy.core.collapse import collapse, exploration_runs
from proxy.core.groups import tool_groups
from proxy.core.legacy_calls import LEGACY_CALL_ID
from proxy.core.sanitize import Policy
from proxy.settings import CompactionSettings, DEFAULT_EXPLORATION_TOOLS, RestoreSettings
from proxy.testing.rules import check_chat
from tests.client_shapes import legacy_functions_session
from tests.factories import assistant, chat, entries_of, measure, stage_context, system, user, wire
from tests.strategies import request_points
from tests.test_compaction_support import count
from tests.test_core_cascade import _monotone as monotone

TOOLS = DEFAULT_EXPLORATION_TOOLS
RESTORE = RestoreSettings(max_files=3, per_file_tokens=400, total_tokens=1000,
                          user_messages_tokens=100)


def legacy_call(name: str, arguments: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"role": "assistant", "content": content,
            "function_call": {"name": name, "arguments": json.dumps(arguments)}}


def legacy_result(name: str, content: Any) -> dict[str, Any]:
    return {"role": "function", "name": name, "content": content}


def legacy_read(path: str, text: Any, name: str = "read_file") -> list[dict[str, Any]]:
    return [legacy_call(name, {"path": path}), legacy_result(name, text)]


def _exploring():
    return chat(system(), user("find the bug"),
                *legacy_read("src/app.py", "x = 1\n" * 60),
                legacy_call("grep", {"pattern": "def main", "path": "src"}),
                legacy_result("grep", "src/app.py:12:def main():\nsrc/cli.py:3:def main():\n" * 8),
                *legacy_read("src/cli.py", "import sys\n" * 40),
                assistant("Found it."), user("fix it"))


def test_a_legacy_call_and_its_result_are_one_step() -> None:
    entries = _exploring()
    groups = tool_groups(entries)
    assert [(g.start, g.end, g.results) for g in groups] == [(2, 4, (3,)), (4, 6, (5,)), (6, 8, (7,))]
    assert [c.name for g in groups for c in g.calls] == ["read_file", "grep", "read_file"]
    assert all(g.answered_once(entries) for g in groups)


def test_a_run_of_legacy_reads_collapses_and_the_last_pair_stays_in_legacy_form() -> None:
    entries = _exploring()
    out = collapse(entries, stage_context(entries, tail=2))
    assert out.origins == (0, 1, None, 6, 7, 8, 9)
    record = content_text(out.entries[2])
    assert '- read_file {"path":"src/app.py"} -> ok, 61 lines' in record
    assert '- grep {"pattern":"def main","path":"src"} -> ok' in record
    sent = wire(out.entries)
    assert LEGACY_CALL_ID not in json.dumps(sent)
    assert sent[3]["function_call"]["name"] == "read_file" and sent[4]["role"] == "function"
    assert check_chat({"model": "gpt-4o", "messages": sent}) is None


def test_a_legacy_step_not_answered_right_after_or_by_its_name_does_not_collapse() -> None:
    named_wrong = chat(user(), *legacy_read("a.py", "a\n" * 50),
                       legacy_call("read_file", {"path": "b.py"}), legacy_result("grep", "b\n" * 50),
                       *legacy_read("c.py", "c\n" * 50), user("next"))
    assert exploration_runs(named_wrong, TOOLS) == []
    unanswered = chat(user(), *legacy_read("a.py", "a\n" * 50),
                      legacy_call("read_file", {"path": "b.py"}),
                      *legacy_read("c.py", "c\n" * 50), user("next"))
    assert exploration_runs(unanswered, TOOLS) == []


def test_a_legacy_result_without_content_is_no_success_to_record() -> None:
    entries = chat(user(), *legacy_read("a.py", "a\n" * 50), *legacy_read("b.py", None),
                   *legacy_read("c.py", "c\n" * 50), user("next"))
    assert exploration_runs(entries, TOOLS) == []


def test_a_legacy_call_with_text_beside_it_is_not_folded() -> None:
    entries = chat(user(), legacy_call("read_file", {"path": "a.py"}, content="Reading."),
                   legacy_result("read_file", "a\n" * 50), *legacy_read("b.py", "b\n" * 50),
                   *legacy_read("c.py", "c\n" * 50), user("next"))
    runs = exploration_runs(entries, TOOLS)
    assert [(r.start, r.end) for r in runs] == [(3, 7)]


def _cut_before_last(entries) -> Cutoff:
    return Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)


def test_a_file_read_through_a_legacy_call_is_restored() -> None:
    entries = chat(user("go"), *legacy_read("a.py", "old a"), *legacy_read("b.py", "b text"),
                   *legacy_read("a.py", "new a"), user("tail"))
    restored = collect(entries, _cut_before_last(entries), RESTORE, count)
    assert restored.file_paths == ("b.py", "a.py")
    joined = "\n".join(m["content"] for m in restored.files)
    assert "new a" in joined and "old a" not in joined and LEGACY_CALL_ID not in joined
    assert all(m["content"].startswith(HEADER) for m in restored.files)


def test_a_legacy_read_answered_by_another_name_or_later_is_not_restored() -> None:
    entries = chat(user("go"), legacy_call("read_file", {"path": "a.py"}),
                   legacy_result("grep", "not the file"),
                   legacy_call("read_file", {"path": "b.py"}), assistant("hm"),
                   legacy_result("read_file", "stray"), user("tail"))
    assert collect(entries, _cut_before_last(entries), RESTORE, count).file_paths == ()


def test_a_legacy_edit_after_a_read_marks_it_stale_and_a_legacy_plan_is_restored() -> None:
    plan = {"todos": [{"content": "write tests", "status": "pending"}]}
    entries = chat(user("go"), *legacy_read("a.py", "text"),
                   legacy_call("edit_file", {"path": "a.py", "old": "t", "new": "T"}),
                   legacy_result("edit_file", "ok"),
                   legacy_call("todo_write", plan), legacy_result("todo_write", "ok"), user("tail"))
    restored = collect(entries, _cut_before_last(entries), RESTORE, count)
    assert "may be out of date" in restored.files[0]["content"]
    assert len(restored.plan) == 1 and "write tests" in restored.plan[0]["content"]


def test_a_legacy_read_again_in_the_kept_tail_is_not_restored() -> None:
    entries = chat(user("go"), *legacy_read("a.py", "old"), user("tail"),
                   *legacy_read("a.py", "new"))
    cutoff = Cutoff(index=3, lead=0, start=0, strategy=PARTIAL)
    assert collect(entries, cutoff, RESTORE, count).file_paths == ()


def test_the_kind_of_a_legacy_result_is_unchanged() -> None:
    entries = _exploring()
    assert entries[3].kind is Kind.OTHER and entries[3].answers is None


@settings(max_examples=15)
@given(st.integers(0, 10**6), st.integers(0, 8), st.booleans())
def test_a_legacy_session_projects_monotonically_and_validly(seed: int, keep: int,
                                                             by_tokens: bool) -> None:
    """SPEC §4 between compactions: request N+1's projection starts with request N's up to
    where a message newly left the window; every projection stays valid legacy form."""
    elements = legacy_functions_session(80, seed=seed)
    context = CascadeContext(CompactionSettings(), measure=measure, policy=Policy.TRANSPARENT,
                             keep_tokens=400 * keep if by_tokens else None,
                             keep_messages=None if by_tokens else keep)
    results = [run_cascade(entries_of("chat", elements[:p]), context)
               for p in request_points(elements)]
    event("a legacy run collapsed" if any(
        r.reports and any(x.name == "collapse" and x.changed for x in r.reports) for r in results)
        else "nothing collapsed")
    for old, new in pairwise(results):
        monotone(old, new)
    for result in results:
        assert check_chat({"model": "gpt-4o", "messages": wire(result.entries)}) is None
