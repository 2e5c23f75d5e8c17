"""The sanitizer: one policy function, blobs and plain reasoning kept apart (SPEC §7)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.overflow import RetryAction, private_state_rejection
from proxy.core.cascade import CascadeContext, run_cascade
from proxy.core.private import GEMINI_STAND_IN
from proxy.core.sanitize import Policy, sanitize
from proxy.settings import CompactionSettings
from proxy.testing.rules import check_chat, check_responses
from tests.factories import (assistant, assistant_calls, chat, entries_of, measure, r_assistant, r_call,
                             r_compaction, r_output, r_reasoning, r_user, read, responses, tool_result,
                             user, wire)
from tests.strategies import SIGNER, conversations, is_server_item, sign_encrypted

SIGNED = {"type": "reasoning.text", "text": "t", "signature": "sig", "format": "anthropic-claude-v1",
          "index": 0}
REDACTED = {"type": "redacted_thinking", "data": "x"}
SUMMARY = {"type": "reasoning.summary", "summary": "s", "format": "unknown", "index": 0}
GEMINI = {"extra_content": {"google": {"thought_signature": "c2ln"}}}
CHAT_DIALECTS = ("openai", "deepseek-thinking", "kimi-thinking", "cerebras", "openai-strict", "gemini",
                 "openrouter", "vllm")


def _history() -> tuple:
    return chat(user("first"),
                assistant_calls({**read("a"), **GEMINI}, reasoning_content="old thought",
                                reasoning_details=[SIGNED], thinking_blocks=[REDACTED]),
                tool_result("a"), assistant("answer", reasoning="why", reasoning_details=[SUMMARY]),
                user("second"),
                assistant_calls({**read("b"), **GEMINI}, reasoning_content="loop thought",
                                reasoning_details=[SIGNED, SUMMARY]),
                tool_result("b"))


def test_transparent_touches_nothing() -> None:
    entries = _history()
    assert sanitize(entries, Policy.TRANSPARENT).entries is entries


def test_cheap_clears_the_past_and_keeps_the_current_loop_as_sent() -> None:
    entries = _history()
    out = sanitize(entries, Policy.CHEAP)
    body = wire(out.entries)
    # The first turn made a tool call: its plain reasoning stays (DeepSeek wants it back).
    assert set(body[1]) == {"role", "content", "tool_calls", "reasoning_content"}
    assert "extra_content" not in body[1]["tool_calls"][0]
    assert body[3] == {"role": "assistant", "content": "answer", "reasoning": "why",
                       "reasoning_details": [SUMMARY]}
    assert out.entries[5] is entries[5] and out.entries[4] is entries[4]
    assert out.blobs == {"reasoning_details": 1, "thinking_blocks": 1, "thought_signature": 1}
    assert out.plain == {}


@pytest.mark.parametrize("policy", [Policy.CHEAP, Policy.COMPACTED, Policy.COMPACTED_KEEP_LOOP])
def test_past_plain_reasoning_stays_only_in_turns_that_made_tool_calls(policy: Policy) -> None:
    entries = chat(user("chat only"), assistant("hi", reasoning_content="idle thought"),
                   user("use a tool"), assistant_calls(read("a"), reasoning_content="call thought"),
                   tool_result("a"), assistant("done", reasoning_content="closing thought"),
                   user("now"), assistant_calls(read("b"), reasoning_content="loop thought"),
                   tool_result("b"))
    out = sanitize(entries, policy)
    body = wire(out.entries)
    assert "reasoning_content" not in body[1]
    assert [body[i]["reasoning_content"] for i in (3, 5, 7)] == ["call thought", "closing thought",
                                                                 "loop thought"]
    assert out.plain == {"reasoning_content": 1}
    assert check_chat({"messages": body}, "deepseek-thinking") is None
    private_free = wire(sanitize(entries, Policy.PRIVATE_FREE).entries)
    assert not any("reasoning_content" in m for m in private_free)


def test_compacted_drops_blobs_keeps_loop_plain_text_and_stands_in_for_gemini() -> None:
    out = sanitize(_history(), Policy.COMPACTED)
    loop = wire(out.entries)[5]
    assert loop["reasoning_content"] == "loop thought" and "reasoning_details" not in loop
    assert loop["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": GEMINI_STAND_IN}}
    assert out.stand_ins == 2  # the past turn's call's signature too: see the next test


def test_a_compacted_loop_keeps_its_bytes_when_the_next_user_message_makes_it_past() -> None:
    """Gemini: the stand-in stays where it was (it was removed, and every user turn changed the
    previous loop's bytes, a prompt-cache miss from there on)."""
    loop = _history()[4:]  # the second user message and its tool loop, Gemini-signed
    now = sanitize(loop, Policy.COMPACTED).entries
    later = sanitize((*loop, *chat(user("third"))), Policy.COMPACTED).entries
    assert [e.to_bytes() for e in later[:len(now)]] == [e.to_bytes() for e in now]


def test_keep_loop_keeps_the_current_loop_exactly() -> None:
    entries = _history()
    out = sanitize(entries, Policy.COMPACTED_KEEP_LOOP)
    assert out.entries[5] is entries[5] and "reasoning_details" not in wire(out.entries)[1]


def test_private_free_leaves_no_reasoning_and_no_stand_ins() -> None:
    body = wire(sanitize(_history(), Policy.PRIVATE_FREE).entries)
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id"} for m in body)
    assert all("extra_content" not in c for m in body for c in m.get("tool_calls", []))


def test_only_private_free_removes_litellm_provider_specific_fields() -> None:
    extras = {"provider_specific_fields": {"citations": None}}
    entries = chat(user("first"), assistant("old", **extras), user("second"),
                   assistant_calls(read("b"), **extras), tool_result("b"))
    for policy in (Policy.CHEAP, Policy.COMPACTED, Policy.COMPACTED_KEEP_LOOP):
        assert sanitize(entries, policy).entries is entries
    out = sanitize(entries, Policy.PRIVATE_FREE)
    assert not any("provider_specific_fields" in m for m in wire(out.entries))
    assert out.blobs == {"provider_specific_fields": 2}


def test_responses_reasoning_goes_whole_with_the_ids_that_named_it() -> None:
    entries = responses(r_compaction(), r_user("first"), r_reasoning("rs_1"),
                        r_call("grep", "a", id="fc_1"), r_output("a"), r_user("second"),
                        r_reasoning("rs_2", encrypted=None, summary="plan"), r_assistant("ok", id="msg_2"))
    cheap = wire(sanitize(entries, Policy.CHEAP).entries)
    assert [i.get("type") for i in cheap] == ["compaction", "message", "function_call",
                                              "function_call_output", "message", "reasoning", "message"]
    assert "id" not in cheap[2] and cheap[6]["id"] == "msg_2"
    compacted = sanitize(entries, Policy.COMPACTED)
    assert [i.get("id") for i in wire(compacted.entries)] == [None, None, None, None, None]
    assert compacted.blobs == {"compaction": 1, "reasoning_item": 1}
    assert compacted.plain == {"reasoning_item": 1}


def test_cheap_keeps_a_past_compaction_item_while_its_chain_holds() -> None:
    """PROTOCOL §4.2: the item stands for the history before it and passes untouched; only the
    proxy's own compaction (COMPACTED) replaces that history, and drops it."""
    entries = responses(r_compaction(), r_user(), r_reasoning("rs_1"), r_assistant("ok"), r_user("next"))
    for changed_at in (None, 2):
        out = wire(sanitize(entries, Policy.CHEAP, changed_at=changed_at).entries)
        assert [i["type"] for i in out] == ["compaction", "message", "message", "message"]
    assert [i["type"] for i in wire(sanitize(entries, Policy.COMPACTED).entries)] == ["message"] * 3


def test_a_compaction_item_whose_chain_changed_goes_with_the_blobs_after_it() -> None:
    entries = responses(r_user("old"), r_compaction(), r_user(), r_reasoning("rs_1"), r_assistant("ok"))
    out = sanitize(entries, Policy.CHEAP, changed_at=0)
    assert [i["type"] for i in wire(out.entries)] == ["message", "message", "message"]
    assert out.blobs == {"compaction": 1, "reasoning_item": 1}


def test_cheap_stages_changing_old_steps_keep_the_compaction_item() -> None:
    """Collapse rewrites old read_file steps (CHEAP); the compaction item before them stays."""
    items = [r_compaction(), r_user("continue the task")]
    for k in range(6):
        items += [r_call("read_file", f"r{k}", {"path": f"f{k}.py"}), r_output(f"r{k}", "print(1)\n" * 20)]
    items += [r_assistant("done reading"), r_user("now fix it")]
    context = CascadeContext(CompactionSettings(), measure=measure, keep_messages=2, now=0.0,
                             last_activity=0.0)
    result = run_cascade(entries_of("responses", items), context)
    assert result.sanitized.policy is Policy.CHEAP
    assert wire(result.entries)[0] == items[0]


def test_cheap_drops_loop_blobs_whose_chain_the_proxy_changed() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_call("grep", "a", id="fc_1"), r_output("a"))
    assert sanitize(entries, Policy.CHEAP).entries is entries
    out = wire(sanitize(entries, Policy.CHEAP, changed_at=1).entries)
    assert [i["type"] for i in out] == ["message", "function_call", "function_call_output"]


def test_a_server_item_gone_with_its_reasoning_item_takes_the_blobs_after_it() -> None:
    # A past turn's reasoning goes under CHEAP, and its web search with it (its id needs it);
    # the current turn's blob was made over a history with that search in it.
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "q"}}
    items = sign_encrypted([r_user("old"), r_reasoning("rs_1"), search, r_assistant("found"),
                            r_user(), r_reasoning("rs_2"), r_call("grep", "a"), r_output("a")])
    assert check_responses({"input": items}, verify_encrypted=SIGNER.encrypted_valid) is None
    out = sanitize(entries_of("responses", items), Policy.CHEAP)
    body = wire(out.entries)
    assert [i["type"] for i in body] == ["message", "message", "message", "function_call",
                                         "function_call_output"]
    assert check_responses({"input": body}, verify_encrypted=SIGNER.encrypted_valid) is None
    assert out.items_dropped == 1


def test_thinking_parts_in_content_are_blobs_when_signed() -> None:
    thinking = {"type": "thinking", "thinking": "t", "signature": "s"}
    entries = chat(assistant_calls(read("a"), content=[thinking]), tool_result("a"), user("now"))
    body = wire(sanitize(entries, Policy.CHEAP).entries)
    assert body[0]["content"] is None


def _visible(element: dict[str, Any]) -> Any:
    if element.get("type") in ("reasoning", "compaction") or is_server_item(element):
        return None  # a server item goes with its reasoning item
    calls = [{k: v for k, v in c.items() if k != "extra_content"} for c in element.get("tool_calls") or []]
    content = element.get("content")
    if isinstance(content, list):
        content = [p for p in content
                   if not (isinstance(p, dict) and p.get("type") in ("thinking", "redacted_thinking"))]
    keep = ("role", "type", "call_id", "name", "arguments", "input", "output", "tool_call_id")
    return {"content": content or None, "calls": calls, **{k: element.get(k) for k in keep}}


@given(st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api), conversations(api, messy=True))), st.sampled_from(list(Policy)))
def test_visible_text_calls_and_results_are_never_touched(drawn: tuple, policy: Policy) -> None:
    api, elements = drawn
    out = sanitize(entries_of(api, elements), policy)
    before = [v for v in map(_visible, elements) if v is not None]
    after = [v for v in map(_visible, wire(out.entries)) if v is not None]
    assert after == before


@given(st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api), conversations(api, messy=True))), st.sampled_from(list(Policy)))
def test_sanitizing_twice_is_sanitizing_once(drawn: tuple, policy: Policy) -> None:
    api, elements = drawn
    once = sanitize(entries_of(api, elements), policy)
    assert sanitize(once.entries, policy).entries == once.entries


_PRIVATE_KEYS = {"reasoning_content", "reasoning", "reasoning_details", "thinking_blocks", "extra_content"}


@given(st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api), conversations(api, messy=True))))
def test_private_free_output_carries_neither_kind_anywhere(drawn: tuple) -> None:
    api, elements = drawn
    body = wire(sanitize(entries_of(api, elements), Policy.PRIVATE_FREE).entries)
    assert not any(_PRIVATE_KEYS & set(e) for e in body)
    assert not any(e.get("type") in ("reasoning", "compaction") for e in body)
    assert not any("extra_content" in c for e in body for c in e.get("tool_calls") or [])


def _projection(api: str, elements: list, policy: Policy | None, keep: int, idle: bool) -> list:
    context = CascadeContext(CompactionSettings(), measure=measure, keep_messages=keep,
                             now=1e9 if idle else 0.0, last_activity=0.0, policy=policy)
    return wire(run_cascade(entries_of(api, elements), context).entries)


@pytest.mark.parametrize("dialect", CHAT_DIALECTS)
@given(data=st.data())
def test_projection_passes_each_chat_dialect(dialect: str, data: st.DataObject) -> None:
    # Per §7: the automatic policy and COMPACTED pass; PRIVATE_FREE is for summarizer requests
    # and history files, which carry no tool loop, so it is not sent to these dialects.
    elements = data.draw(conversations("chat", messy=data.draw(st.booleans()),
                                       dialect=None if dialect == "openai" else dialect))
    policy = data.draw(st.sampled_from((None, Policy.COMPACTED, Policy.COMPACTED_KEEP_LOOP)))
    keep, idle = data.draw(st.integers(0, 8)), data.draw(st.booleans())
    found = check_chat({"messages": _projection("chat", elements, policy, keep, idle)}, dialect)
    if found is not None and dialect == "openrouter" and policy is Policy.COMPACTED:
        # Anthropic wants the loop's thinking back (PROTOCOL §4.5): the one retry restores it.
        retry = private_state_rejection(found.status, found.body)
        assert retry is not None and retry.action is RetryAction.RESTORE_LOOP_BLOBS
        found = check_chat({"messages": _projection("chat", elements, Policy.COMPACTED_KEEP_LOOP,
                                                     keep, idle)}, dialect)
    assert found is None


@given(conversations("responses", messy=True),
       st.sampled_from((None, Policy.COMPACTED, Policy.PRIVATE_FREE)), st.integers(0, 8), st.booleans())
def test_projection_passes_responses_rules_with_chain_bound_blobs(elements: list, policy: Policy | None,
                                                                   keep: int, idle: bool) -> None:
    body = _projection("responses", elements, policy, keep, idle)
    assert check_responses({"input": body}, verify_encrypted=SIGNER.encrypted_valid) is None
