"""`needs_nothing`: a chat request of plain messages under half its trigger in bytes, which the
cascade leaves as it is and no count could put over the trigger (SPEC §4, §5, §6)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.core.cascade import inert
from proxy.core.needs_nothing import needs_nothing
from proxy.inbound import parse_inbound, with_entries
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.tokens.encoding import tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from tests.strategies import conversations

COMMAND = "/compact"
PLAIN = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."},
         {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": [{"type": "text", "text": "Again."}], "name": "ann"}]


def _nothing(messages: list[Any], trigger: int = 100_000, command: str | None = COMMAND) -> bool:
    body = orjson.dumps({"model": "m", "messages": messages})
    return needs_nothing(messages, len(body), trigger, command)


def test_plain_messages_under_half_the_trigger_need_nothing() -> None:
    assert _nothing(PLAIN)
    size = len(orjson.dumps({"model": "m", "messages": PLAIN}))
    assert needs_nothing(PLAIN, size, 2 * size, COMMAND)
    assert not needs_nothing(PLAIN, size, 2 * size - 1, COMMAND)


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "function", "name": "f", "content": "ok"},
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "assistant", "content": "hi", "reasoning_content": "because"},
    {"role": "assistant", "content": "hi", "reasoning_details": [{"type": "reasoning.encrypted"}]},
    {"role": "assistant", "content": None, "audio": {"id": "audio_1"}},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
    {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==",
                                                                          "format": "wav"}}]},
    {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]},
    {"role": "user", "content": [{"type": "text", "text": 3}]},
    {"role": "user", "content": ["bare string part"]},
    {"role": "user", "content": {"type": "text", "text": "not a list"}},
    {"role": ["user"], "content": "an unhashable role"},
    {"role": None, "content": "no role"},
    {"content": "no role at all"},
    {"role": "user", "content": "hi", "unknown_field": 1},
    # A name that is not a string is counted as its Python text (`1e9` as 1000000000.0).
    {"role": "user", "content": "hi", "name": [1e9, 2e9]},
    {"role": "user", "content": "hi", "name": 3},
])
def test_anything_but_plain_text_goes_the_whole_way(message: dict[str, Any]) -> None:
    assert not _nothing([*PLAIN, message])


@pytest.mark.parametrize("content", [
    "/compact", "  /compact focus on the API", "please run /compact",
    [{"type": "text", "text": "/compact"}],
])
def test_a_user_message_naming_the_command_goes_the_whole_way(content: Any) -> None:
    messages = [*PLAIN, {"role": "user", "content": content}]
    assert not _nothing(messages)
    assert _nothing(messages, command=None), "with compaction off the command is only text"
    assert _nothing([*PLAIN, {"role": "assistant", "content": content}]), \
        "only a user's message can be the command"


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=300)
plain_messages = st.lists(st.builds(
    lambda role, text, parts, name: {"role": role, "content": (
        [{"type": "text", "text": t} for t in text] if parts else "".join(text)),
        **({"name": name} if name else {})},
    st.sampled_from(("system", "developer", "user", "assistant")),
    st.lists(texts, min_size=1, max_size=3), st.booleans(),
    st.none() | st.text("abc_", min_size=1, max_size=8)), min_size=1, max_size=8)
ESTIMATOR = TokenEstimator(tokenizer_for("gpt-4o", None))


@given(messages=plain_messages, ascii_only=st.booleans())
def test_no_count_of_a_plain_body_is_above_its_bytes(messages: list[Any],
                                                     ascii_only: bool) -> None:
    """The bound the predicate stands on: the proxy's own estimate (margin and all) and a
    provider's count (the fake's reference) of plain messages are at most the body's bytes,
    however the JSON is written."""
    doc = {"model": "gpt-4o", "messages": messages}
    body = orjson.dumps(doc) if not ascii_only else _ascii_json(doc)
    assert needs_nothing(messages, len(body), 2 * len(body), COMMAND) or any(
        COMMAND in str(m["content"]) for m in messages if m["role"] == "user")
    inbound = with_entries(parse_inbound(Api.CHAT, body))
    assert inbound.entries is not None
    assert inert(inbound.entries, compacted=False, policy=None, keep_loop=False)
    estimate = ESTIMATOR.conservative_total(inbound.entries)  # its margin included
    assert estimate <= len(body)
    assert chat_prompt_tokens(doc) <= len(body)


@given(messages=conversations("chat"))
def test_what_needs_nothing_is_inert_for_the_cascade(messages: list[Any]) -> None:
    body = orjson.dumps({"model": "gpt-4o", "messages": messages})
    if needs_nothing(messages, len(body), 2 * len(body), COMMAND):
        inbound = with_entries(parse_inbound(Api.CHAT, body))
        assert inbound.entries is not None
        assert inert(inbound.entries, compacted=False, policy=None, keep_loop=False)


def _ascii_json(doc: Any) -> bytes:
    import json
    return json.dumps(doc, ensure_ascii=True).encode()
