"""A call id used again in a later step (servers and clients that number calls per response:
`call_0` in step 3 and in step 9). The output after step 9's call is step 9's; step 3's call,
left unanswered, gets its own cancelled output right after its step (SPEC §5), the same one it
got before step 9 came, so what went upstream for the earlier request stays in front of the
next one and the prompt cache keeps hitting."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.conversation import content_text
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.testing.rules import check_responses
from tests.factories import r_call, r_output, r_reasoning, r_user, responses, wire
from tests.strategies_calls import call_item

_SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def _sent(items: list[dict[str, Any]]) -> list[bytes]:
    return [e.to_bytes() for e in repair(responses(*items)).entries]


@pytest.mark.parametrize("kind", ["function_call", "custom_tool_call", "shell_call", "apply_patch_call",
                                  "local_shell_call"])
def test_an_earlier_unanswered_call_keeps_its_cancelled_output_when_its_id_comes_back(kind: str) -> None:
    earlier = [r_user("a"), call_item(kind, "call_0", "a", 0), r_user("b")]
    later = [call_item(kind, "call_0", "b", 1), {**r_output("call_0"), "type": f"{kind}_output"}, r_user("c")]
    if kind == "shell_call":
        later[1]["output"] = [{"stdout": "x", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
    if kind == "apply_patch_call":
        later[1]["status"] = "completed"
    first = _sent(earlier)
    assert len(first) == 4  # the call's cancelled output after it
    out = repair(responses(*earlier, *later))
    assert [e.to_bytes() for e in out.entries][:4] == first
    assert out.cancelled == 1 and out.origins == (0, 1, None, 2, 3, 4, 5)
    assert check_responses({"model": "m", "input": wire(out.entries)}) is None


def test_the_output_of_a_later_step_answers_that_step_not_an_earlier_one() -> None:
    """Parallel calls of one step keep one unit: the reused id answers only the latest."""
    items = [r_user("a"), r_call("grep", "call_0"), r_call("grep", "call_1"), r_output("call_1"),
             r_user("b"), r_reasoning("rs_1"), r_call("grep", "call_0"), r_output("call_0", "later"),
             r_user("c")]
    out = repair(responses(*items))
    sent = wire(out.entries)
    made = [p for p, o in enumerate(out.origins) if o is None]
    assert made == [4] and sent[4]["call_id"] == "call_0"
    assert content_text(out.entries[4]) == CANCELLED_TEXT
    assert sent[8] == {"type": "function_call_output", "call_id": "call_0", "output": "later"}
    assert check_responses({"model": "m", "input": sent}) is None


def test_an_earlier_computer_call_is_noted_when_its_id_comes_back_answered() -> None:
    earlier = [r_user("a"), call_item("computer_call", "call_0", "a", 0), r_user("b")]
    later = [call_item("computer_call", "call_0", "b", 1),
             {"type": "computer_call_output", "call_id": "call_0", "output": _SCREENSHOT}, r_user("c")]
    first = _sent(earlier)
    out = repair(responses(*earlier, *later))
    assert [e.to_bytes() for e in out.entries][:3] == first
    assert out.dropped_calls == 1
    assert check_responses({"model": "m", "input": wire(out.entries)}) is None


def test_two_calls_of_one_step_sharing_an_id_still_take_one_output() -> None:
    """A client bug within one step (not a later step's reuse): one output answers both."""
    items = [r_user("a"), r_call("grep", "call_0"), r_call("glob", "call_0"), r_output("call_0"),
             r_user("b")]
    entries = responses(*items)
    assert repair(entries).entries is entries


def test_a_list_valid_up_to_a_reused_id_is_checked_again_from_there() -> None:
    """The validity check resumes where the last request's valid list ended: a call id made
    again while an earlier call of it is open must still fail it."""
    head = [r_user("a"), r_call("grep", "call_0"), r_output("call_0"), r_user("b")]
    assert repair(responses(*head)).changed == 0  # remembered as valid
    out = repair(responses(*head, r_call("grep", "call_1"), r_user("c"), r_call("grep", "call_1"),
                           r_output("call_1"), r_user("d")))
    assert out.cancelled == 1 and out.origins.index(None) == 5


def test_an_id_made_again_as_a_later_call_of_a_later_step_leaves_the_earlier_unanswered() -> None:
    """The later step's run of calls starts before the reused id: it is still another step."""
    items = [r_user("a"), r_call("grep", "call_0"), r_call("grep", "call_2"), r_output("call_0"),
             r_call("grep", "call_1"), r_call("grep", "call_2"), r_output("call_1"), r_output("call_2"),
             r_user("b")]
    out = repair(responses(*items))
    assert out.cancelled == 1 and out.origins == (0, 1, 2, 3, None, 4, 5, 6, 7, 8)
    assert wire(out.entries)[4]["call_id"] == "call_2"


def test_a_call_sharing_its_id_with_a_local_shell_call_that_goes_gets_its_own_output() -> None:
    """Two steps with nothing between them are one run of calls: with ids numbered per step,
    `call_0` of the first (unanswered) and of the second (a local shell call, answered) share
    the second's output. The local shell call goes with the reasoning item before it (its id
    is required), and its output with it: the function call then has none, so it gets its
    own cancelled one, in its kind, or upstream refuses the list."""
    shell = call_item("local_shell_call", "call_0", "b", 1)
    items = [r_user("a"), r_call("grep", "call_9"), r_reasoning("rs_1"), r_output("call_9"),
             r_call("grep", "call_0"), shell,
             {"type": "local_shell_call_output", "call_id": "call_0", "output": "a.py"}, r_user("b")]
    out = repair(responses(*items))
    sent = wire(out.entries)
    assert check_responses({"model": "m", "input": sent}) is None
    assert out.origins == (0, 1, 3, 4, None, 7)
    assert sent[4]["type"] == "function_call_output" and content_text(out.entries[4]) == CANCELLED_TEXT
    assert (out.cancelled, out.dropped_reasoning, out.dropped_items) == (1, 1, 2)


def test_the_sanitizer_leaves_no_call_of_a_shared_id_without_an_output() -> None:
    from proxy.core.cascade import CascadeContext, run_cascade
    from proxy.settings import CompactionSettings
    from tests.factories import measure, r_assistant

    items = [r_user("a"), r_reasoning("rs_1"), r_assistant("x"), r_call("read_file", "call_0"),
             call_item("local_shell_call", "call_0", "b", 1),
             {"type": "local_shell_call_output", "call_id": "call_0", "output": "a"}, r_user("b")]
    assert check_responses({"model": "m", "input": items}) is None
    context = CascadeContext(CompactionSettings(), measure=measure, keep_messages=1, compacted=True)
    sent = wire(run_cascade(responses(*items), context).entries)
    assert check_responses({"model": "m", "input": sent}) is None
