"""A call that shared its output with a server item the sanitizer took out (a `local_shell_call`
that goes with its dropped reasoning item) gets a cancelled output of its own kind at the end of
its step, as repair gives one when it drops the reasoning item itself (SPEC §5, §7.2)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.conversation import content_text
from proxy.core.cascade import CascadeContext, run_cascade
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.core.sanitize import Policy, sanitize
from proxy.core.shared_outputs import answer_left_calls
from proxy.settings import CompactionSettings
from proxy.testing.rules import check_responses
from tests.factories import measure, r_assistant, r_call, r_output, r_reasoning, r_user, responses, wire
from tests.strategies_calls import call_item

_SHELL_OUTPUT = {"type": "local_shell_call_output", "call_id": "call_0", "output": "a"}
_COMPACTED = CascadeContext(CompactionSettings(), measure=measure, keep_messages=1, compacted=True)


def _step(kind: str = "function_call") -> list[dict[str, Any]]:
    """One response: a call and a local shell call under one id, sharing the shell's output."""
    return [r_reasoning("rs_1"), r_assistant("x"), call_item(kind, "call_0", "a", 0),
            call_item("local_shell_call", "call_0", "b", 1), _SHELL_OUTPUT]


def test_the_left_call_gets_a_cancelled_output_of_its_kind_at_the_end_of_its_step() -> None:
    for kind in ("function_call", "custom_tool_call", "shell_call", "apply_patch_call"):
        result = run_cascade(responses(r_user("a"), *_step(kind), r_user("b")), _COMPACTED)
        sent = wire(result.entries)
        assert check_responses({"model": "m", "input": sent}) is None, kind
        assert [item.get("type") for item in sent] == ["message", "message", kind, f"{kind}_output",
                                                       "message"]
        assert result.origins == (0, 2, 3, None, 6)
        made = result.entries[3]
        assert sent[3]["call_id"] == "call_0"
        assert "completed" not in str(sent[3]) and "exit_code': 0" not in str(sent[3]), kind
        if kind in ("function_call", "custom_tool_call"):
            assert content_text(made) == CANCELLED_TEXT


def test_the_sanitize_report_counts_the_made_output() -> None:
    result = run_cascade(responses(r_user("a"), *_step(), r_user("b")), _COMPACTED)
    report = result.reports[-1]
    # reasoning item, local shell call and its output gone; one output made
    assert (report.name, report.changed) == ("sanitize", 4)
    assert report.tokens_saved == sum(map(measure, responses(r_user("a"), *_step(), r_user("b")))) \
        - sum(map(measure, result.entries))


def test_the_made_output_stays_in_front_when_the_next_response_calls_right_away() -> None:
    """Without its reasoning item the next response's call follows the left call directly; the
    made output keeps its place, so the next request's projection starts with this one's (§4),
    and a reused `call_0` there answers its own step only."""
    first = [r_user("a"), *_step()]
    later = [r_reasoning("rs_2"), r_call("grep", "call_0"), r_output("call_0", "found"), r_user("b")]
    before = wire(run_cascade(responses(*first), _COMPACTED).entries)
    after = wire(run_cascade(responses(*first, *later), _COMPACTED).entries)
    assert after[:len(before)] == before
    assert check_responses({"model": "m", "input": after}) is None
    assert after[len(before):] == [r_call("grep", "call_0"), r_output("call_0", "found"), r_user("b")]


def test_nothing_is_made_when_a_later_call_of_the_step_keeps_the_output() -> None:
    """The shell call first: the function call after it makes the id again and the output,
    kept, answers it (`reasoning_items`)."""
    items = [r_user("a"), r_reasoning("rs_1"), call_item("local_shell_call", "call_0", "b", 1),
             r_call("read_file", "call_0"), _SHELL_OUTPUT, r_user("b")]
    entries = responses(*items)
    clean = sanitize(entries, Policy.COMPACTED)
    assert clean.items_dropped == 1
    assert answer_left_calls(entries, clean.entries, clean.kept) == (clean.entries, clean.kept, 0)
    assert check_responses({"model": "m", "input": wire(run_cascade(entries, _COMPACTED).entries)}) is None


def test_a_transcript_keeps_the_shell_call_and_makes_nothing() -> None:
    entries = responses(r_user("a"), *_step(), r_user("b"))
    clean = sanitize(entries, Policy.PRIVATE_FREE, upstream=False)
    assert clean.items_dropped == 0 and len(clean.entries) == len(entries) - 1


_SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed",
           "action": {"type": "search", "query": "q"}}


# A web search the response ran after its calls belongs to their step (where repair ends it
# too): the made output goes after the step's outputs, not in front of the search's place.
@pytest.mark.parametrize(("between", "origins"), [([], (0, 2, 4, 6, None, 7)),
                                                  ([_SEARCH], (0, 2, 4, 7, None, 8))],
                         ids=["outputs right after the calls", "a server item between"])
def test_the_made_output_goes_where_repair_puts_it_after_the_steps_other_outputs(
        between: list[dict[str, Any]], origins: tuple[int | None, ...]) -> None:
    items = [r_user("a"), r_reasoning("rs_1"), r_call("read_file", "call_0"),
             call_item("local_shell_call", "call_0", "b", 1), r_call("grep", "call_1"), *between,
             _SHELL_OUTPUT, r_output("call_1"), r_user("b")]
    entries = responses(*items)
    clean = sanitize(entries, Policy.COMPACTED)
    out, made_at, made = answer_left_calls(entries, clean.entries, clean.kept)
    assert made == 1 and made_at == origins
    assert wire(out) == wire(repair(clean.entries).entries)
    assert check_responses({"model": "m", "input": wire(out)}) is None
