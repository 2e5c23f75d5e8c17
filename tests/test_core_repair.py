"""Protocol repair: valid tool structure out, nothing invented, valid input untouched."""

from __future__ import annotations

import pytest
from hypothesis import given

from proxy.conversation import Kind, content_text
from proxy.core.repair import CANCELLED_TEXT, INTERRUPTED_NOTE, MOVED_NOTE, repair
from proxy.testing.dialects import DIALECTS
from proxy.testing.rules import check_chat, check_responses
from tests.factories import (assistant, assistant_calls, chat, custom_call, entries_of, r_assistant,
                             r_call, r_custom_call, r_output, r_reasoning, r_user, read, responses,
                             system, tool_result, user, wire)
from tests.strategies import conversations

any_conversation = (conversations("chat", messy=True).map(lambda c: ("chat", c))
                    | conversations("chat", messy=True, legacy=True).map(lambda c: ("chat", c))
                    | conversations("responses", messy=True).map(lambda c: ("responses", c)))
valid_conversation = (conversations("chat").map(lambda c: ("chat", c))
                      | conversations("chat", legacy=True).map(lambda c: ("chat", c))
                      | conversations("responses").map(lambda c: ("responses", c)))


def _valid(api: str, elements: list) -> bool:
    if api == "chat":
        return check_chat({"messages": elements}) is None
    return check_responses({"input": elements}) is None


def test_interrupted_parallel_call_gets_a_cancelled_result_after_its_group() -> None:
    entries = chat(system(), user(), assistant_calls(read("a"), read("b"), read("c")),
                   tool_result("b"), user("stop"))
    out = repair(entries)
    assert [e.raw.get("tool_call_id") for e in out.entries[3:6]] == ["b", "a", "c"]
    assert content_text(out.entries[4]) == CANCELLED_TEXT
    assert out.entries[7] is entries[4]
    assert out.origins == (0, 1, 2, 3, None, None, None, 4)
    assert out.cancelled == 2


def test_a_note_parts_a_cancelled_result_from_the_user_message_after_it() -> None:
    """Mistral refuses a user message right after a tool message (code 3230)."""
    entries = chat(system(), user(), assistant_calls(read("a"), read("b")), tool_result("b"),
                   user("stop"))
    out = repair(entries)
    assert wire(out.entries)[5] == {"role": "assistant", "content": INTERRUPTED_NOTE}
    assert (out.cancelled, out.notes, out.changed) == (1, 1, 2)
    assert check_chat({"messages": wire(out.entries)}, "mistral") is None
    assert repair(out.entries).entries is out.entries
    assert INTERRUPTED_NOTE.startswith("[compaction-proxy note, not written by the assistant:")
    assert "succe" not in INTERRUPTED_NOTE.lower()


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_the_note_passes_every_dialect_of_the_fake(dialect: str) -> None:
    """An assistant text message between a tool result and a user message: DeepSeek and Kimi
    want reasoning only on call messages, Gemini signatures and OpenRouter's thinking only in the
    current turn, which the note is not part of."""
    carrier = assistant_calls(read("a"))
    if dialect in ("deepseek-thinking", "kimi-thinking"):
        carrier = {**carrier, "reasoning_content": "I should read it."}
    before = [user(), carrier, user("stop")]
    out = repair(chat(*before))
    assert out.notes == 1
    assert check_chat({"messages": wire(out.entries)}, dialect) is None


def test_no_note_when_no_user_message_follows_or_the_api_is_responses() -> None:
    assistant_next = repair(chat(user(), assistant_calls(read("a")), assistant("moving on"), user("x")))
    at_end = repair(chat(user(), assistant_calls(read("a"))))
    client_own = chat(user(), assistant_calls(read("a")), tool_result("a"), user("x"))
    in_responses = repair(responses(r_user(), r_call("grep", "a"), r_user("stop")))
    assert (assistant_next.notes, at_end.notes, in_responses.notes) == (0, 0, 0)
    assert [e.kind for e in assistant_next.entries] == [Kind.USER, Kind.ASSISTANT, Kind.RESULT,
                                                        Kind.ASSISTANT, Kind.USER]
    assert repair(client_own).entries is client_own  # a user after the client's own result stays


def test_orphan_duplicate_and_displaced_results_are_dropped_in_chat() -> None:
    entries = chat(user(), tool_result("ghost"), assistant_calls(read("a")), tool_result("a"),
                   tool_result("a"), assistant("x"), tool_result("a"))
    out = repair(entries)
    assert [e.kind for e in out.entries] == [Kind.USER, Kind.ASSISTANT, Kind.RESULT, Kind.ASSISTANT]
    assert out.dropped_results == 3
    assert check_chat({"messages": wire(out.entries)}) is None


def test_responses_pairs_by_call_id_and_answers_custom_calls_in_kind() -> None:
    entries = responses(r_user(), r_call("grep", "a"), r_custom_call("apply_patch", "p", "*** x"),
                        r_user("meanwhile"), r_output("a"), r_output("a"), r_output("nobody"))
    out = repair(entries)
    body = wire(out.entries)
    assert body[3] == {"type": "custom_tool_call_output", "call_id": "p", "output": CANCELLED_TEXT}
    assert [item.get("call_id") for item in body[4:]] == [None, "a"]
    assert check_responses({"input": body}) is None


def test_an_output_after_an_item_reference_may_answer_the_referenced_call() -> None:
    """PROTOCOL §6.2: the referenced item is stored upstream and may be the call; repair cannot
    see it, so it cannot prove the output orphaned and keeps it."""
    reference = {"type": "item_reference", "id": "fc_stored123"}
    entries = responses(r_user(), reference, r_output("call_stored"))
    assert repair(entries).entries is entries
    out = repair(responses(r_output("early"), r_user(), reference, r_output("call_stored"),
                           r_output("call_stored")))
    assert [e.answers for e in out.entries if e.kind is Kind.RESULT] == ["call_stored"]
    assert out.dropped_results == 2  # before any reference, and a second answer


def test_dangling_reasoning_is_dropped_with_the_ids_it_owned() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_user("again"), r_reasoning("rs_2"),
                        r_assistant("hi", id="msg_1"))
    out = repair(entries)
    assert [e.raw.get("id") for e in out.entries] == [None, None, "rs_2", "msg_1"]
    assert out.dropped_reasoning == 1


def test_custom_chat_calls_are_answered_too() -> None:
    entries = chat(user(), assistant_calls(custom_call("apply_patch", "p", "*** Begin")), user("no"))
    assert content_text(repair(entries).entries[2]) == CANCELLED_TEXT


@given(any_conversation)
def test_repaired_conversation_passes_the_upstream_rules(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    out = repair(entries_of(api, elements))
    assert _valid(api, wire(out.entries))


@given(valid_conversation)
def test_valid_conversation_comes_out_as_the_same_entries(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    out = repair(entries)
    assert out.entries is entries and out.changed == 0


@given(any_conversation)
def test_repair_never_invents_an_outcome(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    out = repair(entries_of(api, elements))
    made = [e for e, origin in zip(out.entries, out.origins, strict=True) if origin is None]
    assert all(((e.kind is Kind.RESULT or e.role == "function") and content_text(e) == CANCELLED_TEXT)
               or (e.kind is Kind.ASSISTANT and content_text(e) in (INTERRUPTED_NOTE, MOVED_NOTE))
               for e in made)
    assert "cancelled" in CANCELLED_TEXT and "succe" not in CANCELLED_TEXT.lower()


@given(any_conversation)
def test_repair_is_idempotent_and_deterministic(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    once = repair(entries_of(api, elements))
    again = repair(entries_of(api, elements))
    twice = repair(once.entries)
    assert twice.entries is once.entries
    assert [e.to_bytes() for e in again.entries] == [e.to_bytes() for e in once.entries]


@given(any_conversation)
def test_repair_keeps_client_entries_byte_identical(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    out = repair(entries)
    for entry, origin in zip(out.entries, out.origins, strict=True):
        if origin is not None and "id" not in entries[origin].raw:
            assert entry is entries[origin]


def test_assistant_text_and_user_turns_are_never_dropped() -> None:
    entries = chat(system(), user("a"), assistant("b"), tool_result("x"), user("c"))
    assert [e.raw.get("content") for e in repair(entries).entries] == [
        "You are a careful coding agent.", "a", "b", "c"]


def test_ids_after_a_run_of_reasoning_items_lose_the_dropped_ones_name() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_reasoning("rs_2"), r_assistant("hi", id="msg_1"),
                        r_call("grep", "a", id="fc_1"), r_output("a"), r_reasoning("rs_3"),
                        r_call("grep", "b", id="fc_3"), r_output("b"))
    out = wire(repair(entries).entries)
    assert [i.get("id") for i in out] == [None, "rs_2", None, None, None, "rs_3", None, None]
