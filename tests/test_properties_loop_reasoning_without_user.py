"""A list without any user message is all current tool loop: its plain reasoning stays (SPEC §7.2).

SPEC §7.2: "Inside the current tool loop plain reasoning stays as the client sent it" (DeepSeek
and Kimi thinking modes answer 400 without the `reasoning_content` of the loop's assistant
messages). Agent frameworks that start from system + assistant send chat lists with no user
message at all: system messages, then assistant messages (with or without tool calls) and
their results. Nothing there comes before a latest user message, so nothing is "past": every
assistant message's `reasoning_content` (and vLLM's `reasoning`) must come back byte for byte,
under every policy but PRIVATE_FREE (summarizer requests and history files, §7.1, which never
carry either kind), from the sanitizer alone and through the cascade.

The mutation this guards against: the sanitizer taking "no user message" to mean "everything
is past" (`past = len(entries)` instead of `0`), which drops the plain reasoning of a list
whose assistant messages made no tool call yet. The cascade's own loop property draws lists
that always hold a user message, so it never saw such a list.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.cascade import run_cascade
from proxy.core.sanitize import Policy, sanitize
from tests.factories import entries_of, wire
from tests.strategies import cascade_contexts, conversations, short_text
from tests.test_properties_cascade import PLAIN

# PRIVATE_FREE removes both kinds everywhere by design (SPEC §7.1).
KEEPING_LOOP_POLICIES = [p for p in Policy if p is not Policy.PRIVATE_FREE]


def _tool_traffic(message: dict[str, Any]) -> bool:
    return bool(message.get("tool_calls")) or "function_call" in message or \
        message.get("role") in ("tool", "function")


@st.composite
def lists_without_a_user(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A drawn chat conversation with its user messages taken out: leading system messages,
    then assistant steps and their results. Half the lists also lose every call and result
    (an agent's opening assistant messages before its first call), the case where the turn
    made no tool call."""
    elements = [m for m in draw(conversations("chat", messy=draw(st.booleans())))
                if m.get("role") != "user"]
    if draw(st.booleans()):
        elements = [m for m in elements if not _tool_traffic(m)]
    lead = next((i for i, m in enumerate(elements) if m.get("role") not in ("system", "developer")),
                len(elements))
    if draw(st.booleans()) or not any(m.get("role") == "assistant" for m in elements):
        # The opening assistant message such frameworks send right after the system prompt.
        elements.insert(lead, {"role": "assistant", "content": draw(short_text),
                               "reasoning_content": draw(short_text)})
    out = []
    for message in elements:
        if message.get("role") == "assistant" and draw(st.booleans()):
            message = {**message, "reasoning_content": draw(short_text)}
        out.append(message)
    return out


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    return {key: message.get(key) for key in PLAIN}


@given(lists_without_a_user(), st.sampled_from(KEEPING_LOOP_POLICIES),
       st.none() | st.integers(0, 40), st.booleans())
def test_the_sanitizer_keeps_plain_reasoning_of_a_list_without_a_user_message(
        elements: list, policy: Policy, changed_at: int | None, upstream: bool) -> None:
    entries = entries_of("chat", elements)
    out = sanitize(entries, policy, changed_at=changed_at, upstream=upstream)
    assert list(out.kept) == list(range(len(entries))), "a chat message was dropped"
    for element, origin in zip(wire(out.entries), out.kept, strict=True):
        client = elements[origin]
        if client.get("role") == "assistant":
            assert _plain(element) == _plain(client), (policy, origin, client)


@given(lists_without_a_user(), st.data())
def test_the_cascade_keeps_plain_reasoning_of_a_list_without_a_user_message(
        elements: list, data: st.DataObject) -> None:
    entries = entries_of("chat", elements)
    context = data.draw(cascade_contexts(len(entries), compaction=True))
    # Also forced: the policy the compacted projection, its keep-loop retry or any stage's
    # change would pick, and the transparent one.
    context = replace(context, compacted=data.draw(st.booleans()),
                      policy=data.draw(st.none() | st.sampled_from(KEEPING_LOOP_POLICIES)))
    result = run_cascade(entries, context)
    for element, origin in zip(wire(result.entries), result.origins, strict=True):
        if origin is None or elements[origin].get("role") != "assistant":
            continue  # a message the proxy made (a collapse record) is no client's reasoning
        assert _plain(element) == _plain(elements[origin]), (origin, elements[origin])
