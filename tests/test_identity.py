"""Message identity (SPEC §3): a client's echo of a message gets the message's id."""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api, entry_from_chat, entry_from_responses
from proxy.identity import Identities, canonical_chat, digest_of, with_occurrences

_text = st.text(max_size=40)
_call = st.builds(lambda i, n, a: {"id": f"call_{i}", "type": "function",
                                   "function": {"name": n, "arguments": orjson.dumps(a).decode()}},
                  st.integers(0, 999), st.sampled_from(["read_file", "grep", "bash"]),
                  st.dictionaries(st.text(min_size=1, max_size=5), st.integers(-2**40, 2**40), max_size=3))


@st.composite
def assistant_messages(draw: st.DrawFn) -> dict[str, Any]:
    calls = draw(st.lists(_call, max_size=3))
    message: dict[str, Any] = {"role": "assistant",
                               "content": draw(_text) if not calls or draw(st.booleans()) else None}
    if calls:
        message["tool_calls"] = calls
    if draw(st.booleans()):
        message["refusal"] = None
    return message


def _echo(message: dict[str, Any], rnd: random.Random) -> dict[str, Any]:
    """What a client may send back: keys reordered, nulls dropped, content as one text part,
    reasoning fields added or dropped; tool-call arguments unchanged."""
    echo = {k: v for k, v in message.items() if v is not None or rnd.random() < 0.5}
    if isinstance(echo.get("content"), str) and rnd.random() < 0.5:
        echo["content"] = [{"type": "text", "text": echo["content"]}]
    if rnd.random() < 0.5:
        echo["reasoning_content"] = "thinking..."
    if rnd.random() < 0.3:
        echo["reasoning_details"] = [{"type": "reasoning.text", "text": "t", "signature": "s"}]
    if "tool_calls" in echo:
        echo["tool_calls"] = [dict(reversed(list(c.items()))) for c in echo["tool_calls"]]
    items = list(echo.items())
    rnd.shuffle(items)
    return dict(items)


@given(assistant_messages(), st.integers(0, 2**32))
def test_an_echo_has_the_id_of_what_was_relayed(message: dict[str, Any], seed: int) -> None:
    identities = Identities()
    relayed = identities.digest(entry_from_chat(message))
    echo = _echo(message, random.Random(seed))
    source = orjson.dumps(echo)
    assert identities.digest(entry_from_chat(echo, source)) == relayed


@given(assistant_messages())
def test_changed_arguments_change_the_id(message: dict[str, Any]) -> None:
    if "tool_calls" not in message:
        return
    edited = {**message, "tool_calls": [
        {**message["tool_calls"][0], "function": {**message["tool_calls"][0]["function"],
                                                  "arguments": '{"edited": true}'}},
        *message["tool_calls"][1:]]}
    assert digest_of(canonical_chat(edited)) != digest_of(canonical_chat(message))


def test_repeats_are_told_apart_by_occurrence() -> None:
    ids = with_occurrences(["a", "b", "a", "a"])
    assert ids == ["a#0", "b#0", "a#1", "a#2"]
    identities = Identities()
    entries = [entry_from_chat({"role": "user", "content": "continue"}) for _ in range(3)]
    assert len(set(identities.ids(entries))) == 3


def test_responses_items_with_an_id_use_it() -> None:
    identities = Identities()
    item = {"type": "function_call", "id": "fc_123", "call_id": "call_1", "name": "f",
            "arguments": "{}"}
    assert identities.digest(entry_from_responses(item)) == "id:fc_123"
    # Anchors match on content: the same item with its id stripped is still recognised.
    stripped = {k: v for k, v in item.items() if k != "id"}
    assert identities.content_digest(entry_from_responses(item)) == \
        identities.digest(entry_from_responses(stripped))


def test_responses_message_echo_without_id_matches_content() -> None:
    identities = Identities()
    relayed = {"type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    echo = {"role": "assistant", "content": "Done."}
    assert identities.digest(entry_from_responses(relayed)) == \
        identities.digest(entry_from_responses(echo))
    assert Api.RESPONSES  # the form is shared with chat; only the canonical keys differ


@given(assistant_messages())
def test_a_new_entrys_content_digest_builds_its_canonical_form_once(
        message: dict[str, Any]) -> None:
    # An anchor's echo: a new entry, asked its content digest first; its arguments compact.
    import proxy.identity as identity

    source = orjson.dumps(message)
    fresh = Identities()
    expected = (fresh.digest(entry_from_chat(message, source)),
                fresh.content_digest(entry_from_chat(message, source)))
    built: list[object] = []
    real = identity.canonical

    def counting(entry: Any) -> dict[str, Any]:
        built.append(entry)
        return real(entry)

    identities, entry = Identities(), entry_from_chat(message, source)
    identity.canonical = counting  # type: ignore[assignment]
    try:
        assert identities.content_digest(entry) == expected[1]
        assert identities.digest(entry) == expected[0]
    finally:
        identity.canonical = real  # type: ignore[assignment]
    assert len(built) == 1
