from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.cutoff import FULL, PARTIAL, Previous, choose_cutoff
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Api, Entry, Kind, reference_id
from proxy.core.boundary import summary_cuts
from proxy.core.reasoning_items import is_produced
from tests.strategies import PRODUCED_ID_PREFIXES
from tests.test_compaction_support import (assistant, assistant_calls, conv, measure, r_call,
                                           r_output, r_reasoning, r_user, sessions, session,
                                           system, tool_result, user)


def by_tokens(keep: int) -> Thresholds:
    return Thresholds(trigger=10_000, limit=20_000, keep_tokens=keep, keep_messages=None,
                      profiled=True)


def by_messages(keep: int) -> Thresholds:
    return Thresholds(trigger=10_000, limit=10_000, keep_tokens=None, keep_messages=keep,
                      profiled=False)


def sizes(entries: Sequence[Entry]) -> list[int]:
    return [measure(e) for e in entries]


def _step_item(entry: Entry) -> bool:
    return is_produced(entry) or _reference(entry)


def _reference(entry: Entry) -> bool:
    """An `item_reference`: it may stand for a step's reasoning item."""
    return reference_id(entry) is not None


def assert_valid_cut(entries: Sequence[Entry], cut: int) -> None:
    """The invariants of SPEC §5, checked the slow obvious way."""
    lead = 0
    while lead < len(entries) and entries[lead].kind is Kind.INSTRUCTION:
        lead += 1
    assert lead < cut <= len(entries)
    if cut < len(entries):
        assert entries[cut].kind is not Kind.RESULT, "tail starts with a tool result"
    assert entries[cut - 1].kind is not Kind.REASONING, "reasoning split from its item"
    if cut < len(entries):
        assert not entries[cut - 1].kind is entries[cut].kind is Kind.CALL, "parallel calls split"
    # A reference may begin the next step, unless its id is OpenAI's for an item a step makes.
    if cut < len(entries) and (is_produced(entries[cut]) or str(reference_id(entries[cut])).startswith(
            PRODUCED_ID_PREFIXES)):
        a = cut - 1
        while a >= 0 and (entries[a].kind is Kind.RESULT or _step_item(entries[a])):
            a -= 1
        run = entries[a + 1:cut]  # outputs and items a step may have produced
        began = (a >= 0 and entries[a].kind is Kind.REASONING) or any(map(_reference, run))
        assert not (began and any(e.kind is Kind.RESULT for e in run)), "a step parted by outputs"
    prefix_calls = {c.id for e in entries[:cut] for c in e.calls}
    tail_calls = {c.id for e in entries[cut:] for c in e.calls}
    for e in entries[cut:]:
        if e.kind is Kind.RESULT and e.answers in prefix_calls:
            assert e.answers in tail_calls, f"call {e.answers} split from its result"


@given(sessions, st.integers(0, 3000), st.sampled_from([PARTIAL, FULL]))
def test_cutoff_never_splits_tool_group(case: tuple, keep: int, strategy: str) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    cut = choose_cutoff(entries, sizes(entries), by_tokens(keep), strategy)
    if cut is not None:
        assert_valid_cut(entries, cut.index)
        assert cut.index < len(entries), "the minimal tail is always kept"


@given(sessions, st.integers(0, 10))
def test_cutoff_by_messages_never_splits_tool_group(case: tuple, keep: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    cut = choose_cutoff(entries, sizes(entries), by_messages(keep))
    if cut is not None:
        assert_valid_cut(entries, cut.index)
        assert len(entries) - cut.index <= max(keep, _minimal_tail(entries))


def _minimal_tail(entries: Sequence[Entry]) -> int:
    flags = summary_cuts(entries)
    return len(entries) - max(i for i in range(len(entries)) if flags[i])


@given(sessions, st.integers(0, 3000))
def test_partial_tail_stays_within_budget_unless_minimal(case: tuple, keep: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    cut = choose_cutoff(entries, sizes(entries), by_tokens(keep))
    if cut is not None and len(entries) - cut.index > _minimal_tail(entries):
        assert sum(sizes(entries)[cut.index:]) <= keep


@given(sessions, st.integers(0, 3000))
def test_recompaction_never_moves_the_cut_back(case: tuple, keep: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    first = choose_cutoff(entries, sizes(entries), by_tokens(keep))
    if first is None:
        return
    again = choose_cutoff(entries, sizes(entries), by_tokens(keep),
                          previous=Previous(first.index, "s"))
    assert again is None  # nothing new since the previous cut
    tighter = choose_cutoff(entries, sizes(entries), by_tokens(keep // 4),
                            previous=Previous(first.index, "s"))
    if tighter is not None:
        assert tighter.start == first.index < tighter.index
        assert tighter.previous_summary == "s"


def test_leading_instructions_are_never_summarized() -> None:
    entries = conv(Api.CHAT, [system(), system("more"), user("a"), assistant("b"), user("c"),
                              assistant("d"), user("e")])
    cut = choose_cutoff(entries, sizes(entries), by_messages(2))
    assert cut is not None and (cut.lead, cut.start, cut.index) == (2, 2, 5)
    assert list(cut.summarized) == [2, 3, 4]


def test_cut_moves_later_past_a_tool_group() -> None:
    entries = conv(Api.CHAT, [user("go"), assistant_calls(("a", "read_file", {}),
                                                          ("b", "grep", {})),
                              tool_result("a", "1"), tool_result("b", "2"), assistant("done"),
                              user("next")])
    cut = choose_cutoff(entries, sizes(entries), by_messages(3))  # wants to start at result b
    assert cut is not None and cut.index == 4


def test_full_keeps_only_the_pending_tool_group() -> None:
    entries = conv(Api.RESPONSES, [r_user("fix it"), r_reasoning("rs_1"),
                                   r_call("c1", "read_file", {"path": "a"}), r_output("c1", "x"),
                                   r_reasoning("rs_2"), r_call("c2", "grep", {}),
                                   r_call("c3", "grep", {}), r_output("c2", "y"),
                                   r_output("c3", "z")])
    cut = choose_cutoff(entries, sizes(entries), by_tokens(10_000), FULL)
    assert cut is not None and cut.index == 4  # the reasoning item that produced c2, c3


def test_full_keeps_the_latest_message_when_no_loop_is_pending() -> None:
    entries = conv(Api.CHAT, [user("a"), assistant("b"), user("c")])
    cut = choose_cutoff(entries, sizes(entries), by_tokens(10_000), FULL)
    assert cut is not None and cut.index == 2


def test_nothing_to_summarize_gives_none() -> None:
    entries = conv(Api.CHAT, [system(), user("only")])
    assert choose_cutoff(entries, sizes(entries), by_tokens(0)) is None
    loop = conv(Api.CHAT, [user("a"), assistant_calls(("a", "t", {})), tool_result("a", "x")])
    cut = choose_cutoff(loop, sizes(loop), by_tokens(0), FULL)
    assert cut is not None and cut.index == 1
