"""The retries' placeholders: what a provider demands back in the current loop (SPEC §7.2, §7.4)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.placeholders import with_reasoning_placeholders, with_signature_stand_ins
from proxy.core.private import GEMINI_STAND_IN
from proxy.testing.dialects import deepseek_reasoning, gemini_signatures
from tests.factories import assistant_calls, call, chat, tool_result, user, wire
from tests.strategies import SIGNER, conversations

STAND_IN = {"google": {"thought_signature": GEMINI_STAND_IN}}


def test_the_first_call_of_each_unsigned_loop_step_gets_the_stand_in() -> None:
    past = assistant_calls(call("read_file", "c0"))
    first = assistant_calls(call("read_file", "c1"), call("grep", "c2"))
    second = assistant_calls(call("read_file", "c3", extra_content={"google": {"thought_signature": "sig"}}))
    entries = chat(user("a"), past, tool_result("c0"), user("b"), first, tool_result("c1"),
                   tool_result("c2"), second, tool_result("c3"))
    out, added = with_signature_stand_ins(entries)
    assert added == 1
    calls = out[4].raw["tool_calls"]
    assert calls[0]["extra_content"] == STAND_IN
    assert "extra_content" not in calls[1]  # parallel calls: the first carries it
    assert [e for i, e in enumerate(out) if i != 4] == [e for i, e in enumerate(entries) if i != 4]
    assert {k: v for k, v in calls[0].items() if k != "extra_content"} == first["tool_calls"][0]


def test_other_fields_beside_the_signature_are_kept() -> None:
    extra = {"google": {"cached": True}, "vendor": 1}
    step = assistant_calls(call("read_file", "c1", extra_content=extra))
    out, _ = with_signature_stand_ins(chat(user("a"), step, tool_result("c1")))
    assert out[1].raw["tool_calls"][0]["extra_content"] == {
        "google": {"cached": True, "thought_signature": GEMINI_STAND_IN}, "vendor": 1}


def test_an_empty_signature_counts_as_missing() -> None:
    step = assistant_calls(call("read_file", "c1", extra_content={"google": {"thought_signature": ""}}))
    out, added = with_signature_stand_ins(chat(user("a"), step, tool_result("c1")))
    assert added == 1 and out[1].raw["tool_calls"][0]["extra_content"] == STAND_IN


def _unsigned(element: dict[str, Any]) -> dict[str, Any]:
    calls = element.get("tool_calls")
    if not calls:
        return element
    return {**element, "tool_calls": [{k: v for k, v in c.items() if k != "extra_content"}
                                      for c in calls]}


@given(conversations("chat", dialect="gemini"), st.data())
def test_a_gemini_loop_without_signatures_passes_with_the_stand_ins(elements: list, data: Any) -> None:
    # The client lost some signatures: the retry's projection must pass Gemini's check, and
    # differ from the client's only by the stand-ins.
    lost = data.draw(st.lists(st.booleans(), min_size=len(elements), max_size=len(elements)))
    sent = [_unsigned(e) if drop else e for e, drop in zip(elements, lost, strict=True)]
    out, added = with_signature_stand_ins(chat(*sent))
    assert gemini_signatures(wire(out), SIGNER) is None
    changed = [i for i, (a, b) in enumerate(zip(out, chat(*sent), strict=True)) if a != b]
    assert len(changed) == added
    for i in changed:
        before, after = sent[i]["tool_calls"], out[i].raw["tool_calls"]
        assert after[1:] == before[1:]
        assert after[0]["extra_content"]["google"]["thought_signature"] == GEMINI_STAND_IN
        assert {k: v for k, v in after[0].items() if k != "extra_content"} == \
            {k: v for k, v in before[0].items() if k != "extra_content"}


@given(conversations("chat") | conversations("chat", dialect="deepseek-thinking"), st.data())
def test_a_thinking_thread_without_reasoning_passes_with_the_placeholders(elements: list, data: Any) -> None:
    # The client lost the reasoning of some messages: those get the placeholder, and a message
    # that kept its own (an empty string included) goes as sent.
    lost = data.draw(st.lists(st.booleans(), min_size=len(elements), max_size=len(elements)))
    sent = [{k: v for k, v in e.items() if k != "reasoning_content"} if drop else e
            for e, drop in zip(elements, lost, strict=True)]
    entries = chat(*sent)
    out, added = with_reasoning_placeholders(entries)
    assert deepseek_reasoning(wire(out), SIGNER) is None
    changed = [i for i, (a, b) in enumerate(zip(out, entries, strict=True)) if a is not b]
    assert len(changed) == added
    for i in changed:
        assert "reasoning_content" not in sent[i]
        assert out[i].raw == {**sent[i], "reasoning_content": ""}
