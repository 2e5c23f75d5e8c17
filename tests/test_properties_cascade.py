"""The cascade's promises checked against what the input alone says (SPEC §4, §7.2, §7.3).

- A compacted projection (`compacted=True`) carries no chain-bound blob (Gemini's stand-in
  aside) and past plain reasoning only in turns that made tool calls, as sent; the current loop keeps its plain reasoning as sent, all
  of it under `keep_loop`; and every chat dialect still accepts it.
- Nothing to change (valid, not compacted, everything inside the window, or no stage found
  anything): the client's own entries come back.
- The protected window, measured here from `keep_messages` / `keep_tokens` and the entry
  sizes, is the client's entries, whatever `window_start` the cascade reports.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.compaction.overflow import RetryAction, private_state_rejection
from proxy.conversation import Entries, Kind
from proxy.core.cascade import CascadeContext, CascadeResult, run_cascade
from proxy.core.private import GEMINI_STAND_IN
from proxy.core.sanitize import Policy
from proxy.testing.rules import check_chat, check_responses
from tests.factories import entries_of, measure, wire
from tests.strategies import SIGNER, cascade_contexts, conversations

CHAT_DIALECTS = ("openai", "deepseek-thinking", "kimi-thinking", "cerebras", "openai-strict", "gemini",
                 "openrouter", "vllm")
PLAIN = ("reasoning_content", "reasoning")
LISTS = ("reasoning_details", "thinking_blocks", "reasoning_items")
apis = st.sampled_from(("chat", "responses"))


@st.composite
def compacted_cases(draw: st.DrawFn, messy: bool | None = None) -> tuple[str, list, CascadeContext]:
    api = draw(apis)
    elements = draw(conversations(api, messy=draw(st.booleans()) if messy is None else messy))
    context = draw(cascade_contexts(len(elements), compaction=True))
    return api, elements, replace(context, compacted=True)


def _run(api: str, elements: list, context: CascadeContext) -> tuple[Entries, CascadeResult]:
    entries = entries_of(api, elements)
    return entries, run_cascade(entries, context)


def _latest_user(body: list[dict[str, Any]]) -> int:
    users = [i for i, e in enumerate(body) if e.get("role") == "user"]
    return users[-1] if users else 0


# ---------------------------------------------------------------- what counts as private state

def _signed(element: Any) -> bool:
    if not isinstance(element, dict):
        return True
    kind = element.get("type")
    return kind in ("reasoning.encrypted", "redacted_thinking") or bool(element.get("signature")) or \
        bool(element.get("encrypted_content"))


def _signatures(element: dict[str, Any]) -> list[Any]:
    holders = [element, *[c for c in element.get("tool_calls") or [] if isinstance(c, dict)]]
    found = []
    for holder in holders:
        google = (holder.get("extra_content") or {}).get("google") or {}
        if "thought_signature" in google:
            found.append(google["thought_signature"])
    return found


def _blobs(element: dict[str, Any]) -> list[str]:
    """The chain-bound blobs an element carries (what SPEC §7 lists), by where they are."""
    found = []
    if element.get("type") == "compaction" or (element.get("type") == "reasoning"
                                               and element.get("encrypted_content")):
        found.append(str(element["type"]))
    found += [key for key in LISTS if isinstance(element.get(key), list) and any(map(_signed, element[key]))]
    content = element.get("content")
    if isinstance(content, list):
        found += ["thinking part" for p in content if isinstance(p, dict)
                  and p.get("type") in ("thinking", "redacted_thinking") and _signed(p)]
    found += [f"signature {s}" for s in _signatures(element) if s != GEMINI_STAND_IN]
    return found


def _plain(element: dict[str, Any]) -> list[str]:
    found = [key for key in PLAIN if key in element]
    found += [key for key in LISTS if isinstance(element.get(key), list) and not any(map(_signed, element[key]))]
    if element.get("type") == "reasoning" and not element.get("encrypted_content"):
        found.append("reasoning item")
    content = element.get("content")
    if isinstance(content, list):
        found += ["thinking part" for p in content if isinstance(p, dict)
                  and p.get("type") == "thinking" and not _signed(p)]
    return found


def _private(raw: dict[str, Any]) -> dict[str, Any]:
    calls = [c.get("extra_content") for c in raw.get("tool_calls") or [] if isinstance(c, dict)]
    content = raw.get("content")
    parts = [p for p in content if isinstance(p, dict) and p.get("type") in ("thinking", "redacted_thinking")] \
        if isinstance(content, list) else []
    return {**{k: raw.get(k) for k in (*PLAIN, *LISTS, "extra_content")}, "calls": calls, "parts": parts}


# ---------------------------------------------------------------- compacted projections

def _turns_with_calls(body: list[dict[str, Any]]) -> set[int]:
    """Indexes of the messages whose turn (between two user messages) made a tool call."""
    found: set[int] = set()
    turn: list[int] = []
    for i, element in enumerate([*body, {"role": "user"}]):
        if element.get("role") == "user":
            if any(body[j].get("tool_calls") for j in turn):
                found.update(turn)
            turn = []
        else:
            turn.append(i)
    return found


@given(compacted_cases())
def test_a_compacted_projection_has_no_blob_and_past_plain_reasoning_only_in_tool_turns(
        case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, context)
    body = wire(result.entries)
    latest = _latest_user(body)
    tool_turns = _turns_with_calls(body)
    for i, element in enumerate(body[:latest]):
        assert not _blobs(element), (i, element)
        # A stand-in where the client had a signature, as in the loop it was (prompt caches);
        # none after the retry that keeps the loop as sent, whose past holds no signature.
        origin = result.origins[i]
        had = _signatures(entries[origin].raw) if origin is not None else []
        expected = [] if context.keep_loop else [GEMINI_STAND_IN] * len(had)
        assert _signatures(element) == expected, (i, element)
        if _plain(element):
            # DeepSeek wants a tool-using turn's reasoning back in every later request.
            origin = result.origins[i]
            assert api == "chat" and i in tool_turns and origin is not None, (i, element)
            assert {k: element.get(k) for k in PLAIN} == {k: entries[origin].raw.get(k) for k in PLAIN}
    for i, element in enumerate(body[latest:], latest):
        if context.keep_loop:
            origin = result.origins[i]
            if origin is not None and result.entries[i].kind is not Kind.REASONING:
                assert _private(element) == _private(entries[origin].raw), (i, element)
        else:
            assert not _blobs(element), (i, element)


@given(compacted_cases())
def test_the_current_loop_keeps_its_plain_reasoning_as_sent(case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, context)
    body = wire(result.entries)
    for i in range(_latest_user(body), len(body)):
        origin = result.origins[i]
        if origin is None or api != "chat":
            continue
        client = entries[origin].raw
        assert {k: body[i].get(k) for k in PLAIN} == {k: client.get(k) for k in PLAIN}


@pytest.mark.parametrize("dialect", CHAT_DIALECTS)
@settings(max_examples=25)  # per dialect: eight of them
@given(data=st.data())
def test_a_compacted_projection_passes_each_chat_dialect(dialect: str, data: st.DataObject) -> None:
    elements = data.draw(conversations("chat", messy=data.draw(st.booleans()),
                                       dialect=None if dialect == "openai" else dialect))
    context = replace(data.draw(cascade_contexts(len(elements), compaction=True)), compacted=True)
    found = check_chat({"messages": wire(_run("chat", elements, context)[1].entries)}, dialect)
    if found is not None and dialect == "openrouter" and not context.keep_loop:
        # Anthropic wants the loop's thinking back (PROTOCOL §4.5): the one retry keeps the loop.
        retry = private_state_rejection(found.status, found.body)
        assert retry is not None and retry.action is RetryAction.RESTORE_LOOP_BLOBS
        found = check_chat({"messages": wire(_run("chat", elements, replace(context, keep_loop=True))[1].entries)},
                           dialect)
    assert found is None


@given(compacted_cases(messy=False))
def test_a_compacted_responses_projection_passes_with_its_blobs_checked(case: tuple) -> None:
    api, elements, context = case
    if api != "responses":
        return
    # Not under keep_loop: that retry answers Anthropic's missing-thinking error (chat only);
    # a Responses blob is bound to every item before it, which a compaction always changed.
    body = wire(_run(api, elements, replace(context, keep_loop=False))[1].entries)
    assert check_responses({"input": body}, verify_encrypted=SIGNER.encrypted_valid) is None


@given(conversations("responses"), st.data())
def test_an_uncompacted_responses_projection_keeps_only_blobs_whose_chain_holds(
        elements: list, data: st.DataObject) -> None:
    """SPEC §7 (CHEAP): a reasoning blob is bound to every item before it; once a stage
    changed one of them, the blob must go, and the ones before the change stay valid."""
    context = data.draw(cascade_contexts(len(elements)))
    body = wire(_run("responses", elements, context)[1].entries)
    assert check_responses({"input": body}, verify_encrypted=SIGNER.encrypted_valid) is None


_ECHOED = ("reasoning", "function_call", "custom_tool_call", "message")


@given(conversations("responses"), st.booleans(), st.data())
def test_a_store_on_clients_references_stay_valid_through_the_cascade(
        elements: list, everything: bool, data: st.DataObject) -> None:
    """A store-on client echoes its reasoning items (`everything`: every item with an id) by
    `item_reference`: whatever the stages fold, truncate or clear, upstream, reading each
    reference as the item it stored, still finds every call answered and every reasoning item
    before what it produced."""
    stored = {e["id"]: e for e in elements if e.get("id")}
    echoed = [{"type": "item_reference", "id": e["id"]}
              if e.get("type") in (_ECHOED if everything else _ECHOED[:1]) and e.get("id") else e
              for e in elements]
    context = data.draw(cascade_contexts(len(echoed), compaction=data.draw(st.booleans())))
    body = wire(_run("responses", echoed, context)[1].entries)
    assert check_responses({"input": body, "store": True}, resolve=stored.get) is None


# ---------------------------------------------------------------- nothing to change

@given(apis.flatmap(lambda api: st.tuples(st.just(api), conversations(api))), st.booleans())
def test_nothing_to_change_gives_back_the_clients_own_entries(drawn: tuple, by_tokens: bool) -> None:
    """Valid, not compacted, the whole list inside the window: SPEC §7.3 and §11, the
    request is forwarded as sent, its reasoning of every kind included."""
    api, elements = drawn
    entries = entries_of(api, elements)
    total = sum(map(measure, entries))
    context = CascadeContext(_settings(), measure=measure, now=1e9, last_activity=0.0,
                             keep_tokens=total if by_tokens else None,
                             keep_messages=None if by_tokens else len(entries))
    result = run_cascade(entries, context)
    assert len(result.entries) == len(entries)
    assert all(a is b for a, b in zip(result.entries, entries, strict=True))
    assert not result.changed


@given(apis.flatmap(lambda api: st.tuples(st.just(api), conversations(api))), st.data())
def test_when_no_stage_changed_anything_the_client_entries_come_back(drawn: tuple,
                                                                      data: st.DataObject) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    result = run_cascade(entries, data.draw(cascade_contexts(len(entries))))
    if any(r.changed for r in result.reports if r.name != "sanitize"):
        return
    assert all(a is b for a, b in zip(result.entries, entries, strict=True))
    assert len(result.entries) == len(entries)


def _settings() -> Any:
    from proxy.settings import CompactionSettings, TruncateSettings
    return CompactionSettings(truncate=TruncateSettings(max_arg_chars=100, keep_chars=0))


# ---------------------------------------------------------------- the protected window

def _lead(elements: list[dict[str, Any]]) -> int:
    n = 0
    while n < len(elements) and elements[n].get("role") in ("system", "developer"):
        n += 1
    return n


def _least_window(entries: Entries, context: CascadeContext) -> int:
    """How many entries at the end the settings protect at least (before moving the start
    earlier to a safe cut or a step): the last `keep_messages`, or the longest tail within
    `keep_tokens` and never less than the last entry."""
    lead = _lead([e.raw for e in entries])
    if context.keep_tokens is None:
        keep = context.keep_messages if context.keep_messages is not None else \
            context.settings.fallback_keep_messages
        return min(keep, len(entries) - lead)
    tail, total = 0, 0
    for entry in reversed(entries[lead:]):
        size = measure(entry)
        if tail and total + size > context.keep_tokens:
            break
        tail, total = tail + 1, total + size
    return tail


@given(apis.flatmap(lambda api: st.tuples(st.just(api), conversations(api, max_turns=5))), st.data())
def test_the_window_the_settings_ask_for_is_the_clients_entries(drawn: tuple, data: st.DataObject) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    context = data.draw(cascade_contexts(len(entries)))
    # Aggressive stages (idle, short arguments): an entry left unprotected would change.
    context = replace(context, policy=Policy.TRANSPARENT, now=1e9, last_activity=0.0,
                      settings=_settings())
    result = run_cascade(entries, context)
    least = _least_window(entries, context)
    if least == 0:
        return
    assert all(a is b for a, b in zip(result.entries[-least:], entries[-least:], strict=True))
    assert len(result.entries) - result.window_start >= least
