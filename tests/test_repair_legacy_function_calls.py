"""Repair of the deprecated single-call form (SPEC §5): a `function_call` with no `function`
message right after it, or a `function` message that answers no such call, is repaired as a
`tool_calls` group is: a cancelled result named after the call (never a success), orphans,
second answers and displaced answers dropped, a valid list left as the client's entries."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.conversation import content_text
from proxy.core import repair as repair_module
from proxy.core.cascade import CascadeContext, run_cascade
from proxy.core.microcompact import CLEARED_TEXT, microcompact
from proxy.core.repair import CANCELLED_TEXT, INTERRUPTED_NOTE, repair
from proxy.testing.chat_rules import find_violation
from proxy.settings import CompactionSettings
from tests.factories import (assistant, assistant_calls, chat, measure, read, stage_context, system,
                             tool_result, user, wire)


def _call(name: str = "read_file", arguments: str = '{"path": "a.py"}') -> dict[str, Any]:
    return {"role": "assistant", "content": None, "function_call": {"name": name, "arguments": arguments}}


def _result(name: str = "read_file", content: Any = "print(1)") -> dict[str, Any]:
    return {"role": "function", "name": name, "content": content}


def _cancelled(name: str = "read_file") -> dict[str, Any]:
    return {"role": "function", "name": name, "content": CANCELLED_TEXT}


def test_an_unanswered_legacy_call_gets_a_cancelled_function_result_and_a_note() -> None:
    entries = chat(system(), user(), _call(), user("stop"))
    out = repair(entries)
    assert wire(out.entries) == [system(), user(), _call(), _cancelled(),
                                 {"role": "assistant", "content": INTERRUPTED_NOTE}, user("stop")]
    assert out.origins == (0, 1, 2, None, None, 3)
    assert (out.cancelled, out.notes, out.dropped_results) == (1, 1, 0)
    assert out.entries[5] is entries[3]
    assert find_violation(wire(out.entries)) is None
    assert repair(out.entries).entries is out.entries


def test_a_legacy_call_at_the_end_of_the_list_is_answered_as_cancelled() -> None:
    out = repair(chat(user(), assistant("thinking"), _call("grep", "{}")))
    assert wire(out.entries)[3:] == [_cancelled("grep")]
    assert "succe" not in content_text(out.entries[3]).lower()
    assert find_violation(wire(out.entries)) is None


@pytest.mark.parametrize("messages, kept", [
    ((user(), _result(), assistant()), 2),  # no call at all
    ((user(), assistant_calls(read("a")), tool_result("a"), _result(), user("x")), 4),  # after a tool run
    ((user(), _call(), _result(), _result(), assistant()), 4),  # answered twice
])
def test_a_function_message_that_answers_no_call_is_dropped(messages: tuple, kept: int) -> None:
    entries = chat(*messages)
    out = repair(entries)
    assert len(out.entries) == kept and out.dropped_results == 1 and out.cancelled == 0
    assert all(o is not None for o in out.origins)
    assert find_violation(wire(out.entries)) is None


def test_a_function_result_moved_away_from_its_call_is_dropped_and_the_call_cancelled() -> None:
    entries = chat(user(), _call(), assistant("meanwhile"), _result(), user("go on"))
    out = repair(entries)
    assert wire(out.entries) == [user(), _call(), _cancelled(), assistant("meanwhile"), user("go on")]
    assert (out.cancelled, out.dropped_results, out.notes) == (1, 1, 0)
    assert find_violation(wire(out.entries)) is None


def test_a_function_message_under_another_name_does_not_answer_the_call() -> None:
    entries = chat(user(), _call("read_file"), _result("grep"), _result("read_file"), assistant())
    out = repair(entries)
    # As in a tool run: the stray answer goes, the one named after the call stays, the client's.
    assert wire(out.entries) == [user(), _call("read_file"), _result("read_file"), assistant()]
    assert out.entries[2] is entries[3]
    assert (out.cancelled, out.dropped_results) == (0, 1)


def test_answers_of_the_other_form_answer_nothing() -> None:
    """A `tool` message never answers a legacy call, nor a `function` message a tool call,
    even one that claims the proxy's internal legacy id."""
    entries = chat(user(), _call(), tool_result("<legacy function_call>"), _result(),
                   assistant_calls(read("a")), _result("read_file"), tool_result("a"), assistant())
    out = repair(entries)
    assert wire(out.entries) == [user(), _call(), _result(), assistant_calls(read("a")),
                                 tool_result("a"), assistant()]
    assert (out.cancelled, out.dropped_results) == (0, 2)
    assert find_violation(wire(out.entries)) is None


def test_a_valid_legacy_list_comes_out_as_the_same_entries() -> None:
    """A `function` message's content may be null (PROTOCOL.md §1.1): it still answers."""
    entries = chat(system(), user(), _call(), _result(), _call("grep"), _result("grep", None),
                   assistant(), user("more"))
    assert find_violation(wire(entries)) is None
    out = repair(entries)
    assert out.entries is entries and out.changed == 0


def test_the_memoized_check_sees_damage_after_a_valid_legacy_list() -> None:
    """A steady thread's check starts where the last valid list ended: an unanswered legacy
    call, or a stray function message, in the entries after it is still found."""
    first = [user(), _call(), _result(), assistant()]
    assert repair_module._valid_chat(chat(*first))  # recorded: the next check starts after it
    for more in ([user("again"), _call("grep")], [_result("grep")], [user("x"), _call(), assistant()]):
        entries = chat(*first, *more)
        assert repair_module._valid_chat_from(entries, 0) is None
        assert repair_module._valid_chat(entries) is False
        out = repair(entries)
        assert out.changed and find_violation(wire(out.entries)) is None


def test_the_cascade_repairs_a_list_whose_only_tool_traffic_is_an_unanswered_legacy_call() -> None:
    """A list of user and assistant messages only is passed over as having nothing to repair;
    an assistant `function_call` is a call all the same."""
    entries = chat(user(), _call(), user("stop"))
    out = run_cascade(entries, CascadeContext(CompactionSettings(), measure=measure))
    assert wire(out.entries) == [user(), _call(), _cancelled(),
                                 {"role": "assistant", "content": INTERRUPTED_NOTE}, user("stop")]
    assert find_violation(wire(out.entries)) is None


def test_microcompact_keeps_a_cancelled_legacy_result_as_it_keeps_a_cancelled_tool_result() -> None:
    """The notice says what happened to the call; cleared, it would read as an old output that
    was there (SPEC §5: never invent an outcome). Nor does it count among the latest five."""
    reads = [m for i in range(6) for m in (_call(arguments=f'{{"path": "f{i}.py"}}'),
                                           _result(content=f"body {i} " * 50))]
    entries = repair(chat(user("go"), _call(), *reads, user("next"))).entries
    assert wire(entries)[2] == _cancelled()
    out = microcompact(entries, stage_context(entries, tail=1, now=7 * 3600.0, last_activity=0.0))
    assert out.entries[2] is entries[2]
    assert [i for i, e in enumerate(out.entries) if content_text(e) == CLEARED_TEXT] == [4]


def test_a_legacy_call_with_arguments_as_an_object_keeps_its_result() -> None:
    """Whether arguments must be a string is upstream's rule to judge (as for `tool_calls`,
    read as their JSON text); the pairing is by position and name, and this pair is whole."""
    odd = {"role": "assistant", "content": None,
           "function_call": {"name": "read_file", "arguments": {"path": "a.py"}}}
    entries = chat(user(), odd, _result(), assistant())
    out = repair(entries)
    assert out.entries is entries and out.changed == 0
