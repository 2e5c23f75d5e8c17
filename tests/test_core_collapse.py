"""Collapse: old exploration runs become one proxy record; the last step stays verbatim."""

from __future__ import annotations

import json

from proxy.conversation import Kind, content_text
from proxy.core.boundary import safe_cuts
from proxy.core.collapse import collapse, exploration_runs, settled_start
from proxy.core.exploration import HEADER
from proxy.core.groups import tool_groups
from proxy.core.repair import CANCELLED_TEXT
from proxy.settings import DEFAULT_EXPLORATION_TOOLS
from proxy.testing.rules import check_chat, check_responses
from tests.factories import (assistant, assistant_calls, call, chat, r_assistant, r_call, r_output,
                             r_reasoning, r_user, read, responses, stage_context, system,
                             tool_result, user, wire)

TOOLS = DEFAULT_EXPLORATION_TOOLS


def _exploring_chat() -> tuple:
    return chat(
        system(), user("find the bug"),
        assistant_calls(read("a", "src/app.py", 10, 80), read("b", "src/db.py")),
        tool_result("a", "x = 1\n" * 70), tool_result("b", "Error: no such file"),
        assistant_calls(call("grep", "c", {"pattern": "def main", "path": "src"})),
        tool_result("c", "src/app.py:12:def main():\nsrc/cli.py:3:def main():"),
        assistant_calls(read("d", "src/cli.py", 1, 40)), tool_result("d", "import sys\n" * 40),
        assistant("Found it."), user("fix it"))


def test_run_becomes_one_record_and_the_last_step_stays_verbatim() -> None:
    entries = _exploring_chat()
    out = collapse(entries, stage_context(entries, tail=2))
    assert [e.kind for e in out.entries] == [Kind.INSTRUCTION, Kind.USER, Kind.ASSISTANT,
                                             Kind.ASSISTANT, Kind.RESULT, Kind.ASSISTANT, Kind.USER]
    assert out.entries[3:] == entries[7:]
    assert out.origins == (0, 1, None, 7, 8, 9, 10)
    assert out.report.changed == 5 and out.report.tokens_saved > 0
    assert check_chat({"messages": wire(out.entries)}) is None


def test_record_keeps_paths_line_ranges_queries_status_and_size() -> None:
    entries = _exploring_chat()
    record = content_text(collapse(entries, stage_context(entries, tail=2)).entries[2])
    assert record.startswith(HEADER.format(n=3, s="s")[:40])
    assert '{"path":"src/app.py","start_line":10,"end_line":80} -> ok, 71 lines' in record
    assert '{"path":"src/db.py"} -> error' in record
    assert '{"pattern":"def main","path":"src"} -> ok' in record
    assert "mentions src/app.py:12, src/cli.py:3" in record


def test_nothing_collapses_inside_the_window_or_with_assistant_text() -> None:
    entries = _exploring_chat()
    assert collapse(entries, stage_context(entries, tail=5)).entries is entries
    talky = chat(user(), assistant_calls(read("a"), content="Reading."), tool_result("a"),
                 assistant_calls(read("b")), tool_result("b"), user("next"))
    assert collapse(talky, stage_context(talky, tail=1)).entries is talky


def test_cancelled_or_non_exploration_steps_break_a_run() -> None:
    entries = chat(user(), assistant_calls(read("a")), tool_result("a"),
                   assistant_calls(call("bash", "b", {"command": "ls"})), tool_result("b"),
                   assistant_calls(read("c")), tool_result("c"),
                   assistant_calls(read("d")), tool_result("d", CANCELLED_TEXT),
                   assistant_calls(read("e")), tool_result("e"), user("next"))
    assert exploration_runs(entries, TOOLS) == []


def test_responses_run_collapses_with_its_reasoning_and_stays_valid() -> None:
    entries = responses(
        r_user(), r_reasoning("rs_1"), r_call("read_file", "a", {"path": "a.py"}, id="fc_1"),
        r_output("a", "text\n" * 60), r_call("glob", "b", {"pattern": "**/*.py"}),
        r_output("b", "a.py\nb.py\n" * 30),
        r_reasoning("rs_3"), r_call("grep", "c", {"pattern": "x"}), r_output("c", "a.py:1:x"),
        r_assistant("done"), r_user("next"))
    out = collapse(entries, stage_context(entries, tail=1))
    assert [e.raw.get("type") for e in out.entries[1:6]] == [
        "message", "reasoning", "function_call", "function_call_output", "message"]
    assert '"path":"a.py"' in content_text(out.entries[1])
    assert check_responses({"input": wire(out.entries)}) is None


def test_a_step_answered_call_by_call_stays_whole_when_a_later_call_has_an_id() -> None:
    # A client that answers each call as it goes: fc_2's id may name rs_1, so folding the first
    # call with rs_1 and keeping fc_2 would send it without its reasoning item.
    def session(second_id: str | None) -> tuple:
        extra = {"id": second_id} if second_id else {}
        return responses(r_user(), r_reasoning("rs_1"),
                         r_call("read_file", "a", {"path": "a.py"}, id="fc_1"), r_output("a", "text\n" * 60),
                         r_call("read_file", "b", {"path": "b.py"}, **extra), r_output("b", "text\n" * 60),
                         r_assistant("done"), r_user("next"))
    with_id = session("fc_2")
    (step,) = tool_groups(with_id)
    assert (step.start, step.end, step.call_entries, step.results) == (1, 6, (2, 4), (3, 5))
    assert collapse(with_id, stage_context(with_id, tail=1)).entries == with_id


def test_a_call_without_an_id_does_not_part_a_step_from_its_later_calls() -> None:
    # A client that rebuilt the second call itself (no id) and kept the third's (fc_3, which
    # may name rs_1): whether the step goes on is told by the first entry after the outputs
    # alone, so an id-less call goes on with it too, and the step is folded or kept whole.
    entries = responses(
        r_user(), r_reasoning("rs_1"),
        r_call("read_file", "a", {"path": "a.py"}, id="fc_1"), r_output("a", "text\n" * 60),
        r_call("read_file", "b", {"path": "b.py"}), r_output("b", "text\n" * 60),
        r_call("read_file", "c", {"path": "c.py"}, id="fc_3"), r_output("c", "text\n" * 60),
        r_assistant("done"), r_user("next"))
    (step,) = tool_groups(entries)
    assert (step.start, step.end, step.call_entries, step.results) == (1, 8, (2, 4, 6), (3, 5, 7))
    out = collapse(entries, stage_context(entries, tail=1))
    kept = [e.raw for e in out.entries]
    assert (kept == [e.raw for e in entries]
            or not any(e.raw.get("id") in ("rs_1", "fc_1", "fc_3") for e in out.entries))


def test_collapse_is_idempotent() -> None:
    entries = _exploring_chat()
    once = collapse(entries, stage_context(entries, tail=2))
    twice = collapse(once.entries, stage_context(once.entries, tail=2))
    assert twice.entries is once.entries


def test_window_start_moves_back_to_the_run_it_would_cut() -> None:
    entries = _exploring_chat()
    safe = safe_cuts(entries)
    assert settled_start(entries, 7, TOOLS, safe, 1) == 2
    assert settled_start(entries, 9, TOOLS, safe, 1) == 9


def test_open_run_at_the_end_is_protected_until_it_ends() -> None:
    entries = chat(user(), assistant_calls(read("a")), tool_result("a"),
                   assistant_calls(read("b")), tool_result("b"))
    assert settled_start(entries, 5, TOOLS, safe_cuts(entries), 0) == 1


def test_record_arguments_are_exact_json_of_the_short_scalars() -> None:
    entries = chat(user(), assistant_calls(call("grep", "a", {"pattern": "路径", "context": 3,
                                                              "body": "y" * 500})),
                   tool_result("a"), assistant_calls(read("b")), tool_result("b"), user("n"))
    record = content_text(collapse(entries, stage_context(entries, tail=1)).entries[1])
    line = record.splitlines()[1]
    args = json.loads(line[len("- grep "):line.index(" -> ")])
    assert args["pattern"] == "路径" and args["context"] == 3 and len(args["body"]) < 250


def test_a_run_that_ends_the_list_is_not_folded_even_outside_the_window() -> None:
    # Its next step may extend it: folded now, it would be folded differently on the next
    # request. The cascade's window never leaves it outside (`settled_start`); the stage
    # holds on its own too.
    entries = chat(user(), assistant_calls(read("a")), tool_result("a"),
                   assistant_calls(read("b")), tool_result("b"), assistant_calls(read("c")),
                   tool_result("c"))
    assert collapse(entries, stage_context(entries, tail=0)).entries is entries


def test_a_run_whose_record_would_not_be_smaller_stays_as_sent() -> None:
    # Three tiny steps: the record's note and one line per call outweigh what they fold, so
    # folding would grow the prompt and still change the request (SPEC §4.1: a compact record).
    entries = chat(
        system(), user("look around"),
        assistant_calls(call("list_dir", "a", {"path": "."})), tool_result("a", "ok"),
        assistant_calls(call("glob", "b", {"pattern": "*.py"})), tool_result("b", "a.py"),
        assistant_calls(call("grep", "c", {"pattern": "x"})), tool_result("c", "a.py:1:x"),
        assistant("done"), user("next"))
    out = collapse(entries, stage_context(entries, tail=2))
    assert out.entries is entries
    assert out.report.changed == 0 and out.report.tokens_saved == 0


def test_of_two_runs_only_the_one_its_record_shrinks_is_folded() -> None:
    tiny = [assistant_calls(call("list_dir", "a", {"path": "."})), tool_result("a", "ok"),
            assistant_calls(call("glob", "b", {"pattern": "*.py"})), tool_result("b", "a.py")]
    large = [assistant_calls(read("c", "src/app.py")), tool_result("c", "x = 1\n" * 300),
             assistant_calls(read("d", "src/db.py")), tool_result("d", "y = 2\n" * 10)]
    entries = chat(system(), user("look around"), *tiny, assistant("hm"), *large,
                   assistant("done"), user("next"))
    out = collapse(entries, stage_context(entries, tail=2))
    assert out.entries[:7] == entries[:7]  # the tiny run, as sent
    assert out.origins == (0, 1, 2, 3, 4, 5, 6, None, 9, 10, 11, 12)
    assert out.report.changed == 2 and out.report.tokens_saved > 0
