"""Safe cuts and the protected window: where a conversation may be split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api, Entries, Entry, Kind, leading_instructions, reference_id
from proxy.core.boundary import (_open_call_spans, is_summary_cut, nearest_safe_cut, safe_cuts,
                                 summary_cuts)
from proxy.core.reasoning_items import is_produced
from proxy.core.window import keep_for, window_of, window_start
from proxy.settings import CompactionSettings, ModelProfile
from proxy.testing.rules import check_chat, check_responses
from tests.factories import (assistant, assistant_calls, chat, entries_of, r_assistant, r_call,
                             r_output, r_reasoning, r_user, read, responses, system, tool_result,
                             user, wire)
from tests.strategies import conversations


def test_cut_never_splits_a_tool_group_in_chat() -> None:
    entries = chat(system(), user(), assistant_calls(read("a"), read("b")), tool_result("a"),
                   tool_result("b"), assistant("done"))
    assert safe_cuts(entries) == [True, True, True, False, False, True, True]


def test_cut_keeps_reasoning_and_parallel_calls_together_in_responses() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_call("grep", "a"), r_call("grep", "b"),
                        r_output("a"), r_output("b"), r_user("next"))
    assert safe_cuts(entries) == [True, True, False, False, False, False, True, True]


def test_cut_keeps_a_responses_message_with_the_calls_of_its_step() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_assistant("Let me look.", id="msg_1"),
                        r_call("grep", "a", id="fc_1"), r_output("a"))
    assert safe_cuts(entries)[2:5] == [False, False, False]


def test_an_output_astray_after_a_reasoning_item_does_not_part_it_from_what_it_produced() -> None:
    # A messy client's duplicate output between a reasoning item and its message (found by the
    # /compact property): a cut after the output summarized the reasoning away and kept the
    # message's id, which names it; upstream refused the next turn.
    entries = responses(r_user(), r_call("grep", "a"), r_output("a"), r_user("next"),
                        r_reasoning("rs_1"), r_output("a"), r_output("a"),
                        r_assistant("Done.", id="msg_1"), r_user("more"))
    assert safe_cuts(entries)[6:9] == [False, False, True]  # 6: the call still answered


def test_the_summary_never_parts_a_steps_calls_across_an_output() -> None:
    # Two calls of one step (their ids name rs_1), and between them the first call's output (a
    # client that answers each call as it goes) or an output astray: a summary cut there would
    # take rs_1 and keep fc_2, which upstream refuses. The window may cut there (nothing of the
    # step is dropped before it), the summary may not.
    for between in (r_output("a"), r_output("zz")):
        entries = responses(r_user(), r_reasoning("rs_1"), r_call("grep", "a", id="fc_1"), between,
                            r_call("grep", "b", id="fc_2"), r_output("b"),
                            r_assistant("Done.", id="msg_1"), r_user("next"))
        assert safe_cuts(entries)[4] and safe_cuts(entries)[6]
        assert summary_cuts(entries) == [*safe_cuts(entries)[:4], False, False, False, True, True]


def test_the_summary_may_cut_where_no_reasoning_item_began_the_run() -> None:
    plain = responses(r_user(), r_call("grep", "a", id="fc_1"), r_output("a"),
                      r_call("grep", "b", id="fc_2"), r_output("b"), r_assistant("Done."))
    assert summary_cuts(plain) == safe_cuts(plain) == [True, True, False, True, False, True, True]
    chat_list = chat(system(), user(), assistant_calls(read("a")), tool_result("a"),
                     assistant_calls(read("b")), tool_result("b"), assistant("done"))
    assert summary_cuts(chat_list) == safe_cuts(chat_list)


def test_a_reference_begins_a_step_for_the_summary_as_a_reasoning_item_does() -> None:
    # A store-on client echoes the reasoning item by reference: it may be rs_1.
    entries = responses(r_user(), {"type": "item_reference", "id": "rs_1"},
                        r_call("grep", "a", id="fc_1"), r_output("a"),
                        r_call("grep", "b", id="fc_2"), r_output("b"), r_user("next"))
    assert safe_cuts(entries)[4] and not summary_cuts(entries)[4]


def test_the_summary_may_cut_before_a_reference_after_outputs() -> None:
    # A store-on client echoes every item by reference: the one after the outputs may be the
    # next step's reasoning item, as for the window.
    entries = responses(r_user(), *({"type": "item_reference", "id": i} for i in ("rs_1", "fc_1")),
                        r_output("a"), *({"type": "item_reference", "id": i} for i in ("rs_2", "fc_2")),
                        r_output("b"), r_user("next"))
    assert summary_cuts(entries) == safe_cuts(entries)
    assert summary_cuts(entries)[4]


def test_the_summary_keeps_a_step_whole_over_a_reference_whose_id_is_a_call_s() -> None:
    # fc_2 answered after fc_1's output, both echoed by reference: OpenAI's ids begin with
    # `fc_` for a function call, so this reference stands for rs_1's second call, not for the
    # next step's reasoning item; cutting before it would summarize rs_1 away.
    def refs(*ids: str) -> list[dict]:
        return [{"type": "item_reference", "id": i} for i in ids]
    entries = responses(r_user(), *refs("rs_1", "fc_1"), r_output("a"), *refs("fc_2"),
                        r_output("b"), *refs("msg_3"), r_user("next"))
    safe, summary = safe_cuts(entries), summary_cuts(entries)
    assert safe[4] and not summary[4]
    assert safe[6] and not summary[6]  # a message's id too
    assert [is_summary_cut(entries, b) for b in range(len(entries) + 1)] == summary


@pytest.mark.parametrize("server_id", ["ws_1", "fs_1", "cu_1", "ci_1", "ig_1", "lsh_1", "mcp_1",
                                       "mcpl_1", "mcpr_1"])
def test_the_summary_keeps_a_step_whole_over_a_reference_to_a_server_item(server_id: str) -> None:
    # A server call (a web search, a code interpreter run, ...) rs_1 produced after fc_1, whose
    # output the client put right after it: the reference's id names that item type, which
    # upstream wants with its reasoning item; cutting before it would summarize rs_1 away.
    def refs(*ids: str) -> list[dict]:
        return [{"type": "item_reference", "id": i} for i in ids]
    entries = responses(r_user(), *refs("rs_1", "fc_1"), r_output("a"), *refs(server_id),
                        *refs("msg_2"), r_user("next"))
    safe, summary = safe_cuts(entries), summary_cuts(entries)
    assert safe[4] and not summary[4]
    assert [is_summary_cut(entries, b) for b in range(len(entries) + 1)] == summary


def test_a_summary_cut_keeps_its_verdict_while_the_list_grows() -> None:
    # It reads only what lies before the cut (a stored checkpoint's cut must stay usable).
    whole = [r_user(), r_reasoning("rs_1"), r_call("grep", "a", id="fc_1"), r_output("a"),
             r_user("next"), r_reasoning("rs_2"), r_call("grep", "b", id="fc_2"), r_output("b"),
             r_call("grep", "c", id="fc_3"), r_output("c"), r_user("more")]
    final = summary_cuts(responses(*whole))
    for n in range(1, len(whole) + 1):
        flags = summary_cuts(responses(*whole[:n]))
        assert [b for b in range(n) if flags[b] and final[b]] == [b for b in range(n) if flags[b]]


def test_cut_is_unsafe_while_a_call_waits_for_a_later_output() -> None:
    entries = responses(r_user(), r_call("grep", "a"), r_user("meanwhile"), r_output("a"))
    assert safe_cuts(entries)[2:4] == [False, False]


def test_nearest_safe_cut_moves_earlier_first_then_later() -> None:
    entries = chat(system(), user(), assistant_calls(read("a")), tool_result("a"), user("b"))
    assert nearest_safe_cut(entries, 3) == 2
    only_group = chat(system(), assistant_calls(read("a")), tool_result("a"), user())
    assert nearest_safe_cut(only_group, 2) == 3


@given(conversations("chat") | conversations("responses").map(lambda c: ("r", c)), st.data())
def test_every_summary_cut_leaves_a_valid_tail(drawn: object, data: st.DataObject) -> None:
    """What lies between the leading instructions and a summary cut goes (the summary stands
    for it): the rest must be valid alone. The window's cuts drop nothing (`safe_cuts` may
    part a step across an output there)."""
    api, elements = ("responses", drawn[1]) if isinstance(drawn, tuple) else ("chat", drawn)
    entries = entries_of(api, elements)  # type: ignore[arg-type]
    lead = leading_instructions(entries)
    for b, safe in enumerate(summary_cuts(entries)):
        if not safe or b < lead or b == len(entries):
            continue
        kept = wire(entries[:lead] + entries[b:])
        found = (check_chat({"messages": kept}) if api == "chat"
                 else check_responses({"input": kept}))
        assert found is None, (b, found)


def test_window_keeps_the_last_messages_without_a_profile() -> None:
    entries = chat(system(), *[user(str(i)) for i in range(10)])
    assert window_start(entries, [1] * 11) == 5
    assert window_start(entries, [1] * 11, keep_messages=3) == 8


def test_window_by_tokens_always_keeps_the_last_entry() -> None:
    entries = chat(system(), user("a"), user("b"), user("c"))
    assert window_start(entries, [5, 5, 5, 5], keep_tokens=10) == 2
    assert window_start(entries, [5, 5, 5, 50], keep_tokens=10) == 3


def test_window_never_starts_inside_a_tool_group() -> None:
    entries = chat(system(), user(), assistant_calls(read("a"), read("b")), tool_result("a"),
                   tool_result("b"))
    assert window_start(entries, [1] * 5, keep_messages=1) == 2


def test_window_protects_lead_and_latest_user() -> None:
    entries = chat(system(), user("old"), assistant("x"), user("latest"), assistant("y"))
    window = window_of(entries, 1)
    assert [i for i in range(5) if window.touchable(i)] == [1, 2]


def test_keep_budget_comes_from_the_profile_or_the_fallback() -> None:
    settings = CompactionSettings()
    assert keep_for(settings, None) == (None, 6)
    assert keep_for(settings, ModelProfile("gpt-x", max_input_tokens=128_000)) == (12_800, None)
    wide = ModelProfile("gpt-y", max_input_tokens=100_000, keep_ratio=0.2)
    assert keep_for(settings, wide) == (20_000, None)


def test_stepped_window_starts_at_the_last_anchor_before_it() -> None:
    entries = chat(system(), *[user(str(i)) for i in range(8)])
    sizes = [10, 4, 4, 4, 4, 4, 4, 4, 4]  # totals before entry i: 0 10 14 18 22 26 30 34 38
    assert window_start(entries, sizes, keep_messages=4) == 5
    assert window_start(entries, sizes, keep_messages=4, step_tokens=10) == 4  # 20 was passed at 4
    assert window_start(entries, sizes, keep_messages=3, step_tokens=10) == 6  # 30 was passed at 6


def _safe_cuts_one_by_one(entries: Entries) -> list[bool]:
    """The rules of `safe_cuts`, entry by entry (what it computes with `map`)."""
    safe = [not span for span in _open_call_spans(entries)]
    reasoning_before = False  # a reasoning item, then only outputs
    for b, here in enumerate(entries):
        if here.kind is Kind.RESULT and reasoning_before:
            safe[b + 1] = False  # an output astray does not part the reasoning from its item
        reasoning_before = here.kind is Kind.REASONING or (
            here.kind is Kind.RESULT and reasoning_before)
        if here.kind is Kind.RESULT or (here.role == "function" and here.api is Api.CHAT):
            safe[b] = False  # a tool result, or the deprecated `function` one
        elif here.kind is Kind.REASONING:
            safe[b + 1] = False
        elif b and here.api is Api.RESPONSES and _produced(here) and _produced(entries[b - 1]):
            safe[b] = False
    return safe


def _produced(entry: Entry) -> bool:
    return is_produced(entry) or reference_id(entry) is not None


def _by_reference(item: dict, everything: bool = False) -> dict:
    """What a store-on client echoes for a reasoning item (`everything`: for any item with an
    id): a reference to it."""
    kinds = ("reasoning", "function_call", "custom_tool_call", "message") if everything else ("reasoning",)
    if item.get("type") in kinds and item.get("id"):
        return {"type": "item_reference", "id": item["id"]}
    return item


def test_a_reference_stays_with_the_item_after_it_that_its_step_produced() -> None:
    entries = responses(r_user(), {"type": "item_reference", "id": "rs_1"},
                        r_call("grep", "a", id="fc_1"), r_output("a"),
                        {"type": "item_reference", "id": "msg_1"}, r_user("next"))
    assert safe_cuts(entries) == [True, True, False, False, True, True, True]


@given(conversations("responses"), st.booleans())
def test_every_summary_cut_leaves_a_valid_tail_when_reasoning_comes_by_reference(
        elements: list, everything: bool) -> None:
    # Upstream reads each reference as the stored item it names (`everything`: a client that
    # echoes every item by reference; its calls' outputs pair with the calls stored).
    stored = {e["id"]: e for e in elements if e.get("id")}
    entries = entries_of("responses", [_by_reference(e, everything) for e in elements])
    lead = leading_instructions(entries)
    for b, safe in enumerate(summary_cuts(entries)):
        if not safe or b < lead or b == len(entries):
            continue
        found = check_responses({"input": wire(entries[:lead] + entries[b:]), "store": True},
                                resolve=stored.get)
        assert found is None, (b, found)


@given(st.sampled_from(("chat", "responses")).flatmap(
    lambda api: st.tuples(st.just(api), conversations(api) | conversations(api, messy=True))))
def test_safe_cuts_are_the_rules_applied_entry_by_entry(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    assert safe_cuts(entries) == _safe_cuts_one_by_one(entries)
