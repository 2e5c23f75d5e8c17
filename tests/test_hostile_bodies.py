"""Hostile input never breaks the proxy: any body gets upstream's answer or a clear 4xx."""

from __future__ import annotations

from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=12))
_json = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
_call = st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.text(max_size=6), _scalar), "type": st.sampled_from(["function", "custom", 3]),
    "function": st.one_of(_json, st.fixed_dictionaries(
        {"name": st.text(max_size=8)}, optional={"arguments": st.one_of(st.text(max_size=30), _json)})),
    "custom": _json, "extra_content": _json})
_chat_message = st.fixed_dictionaries({}, optional={
    "role": st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]),
                      _scalar),
    "content": st.one_of(_json, st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "input_audio", "refusal", "thinking", 1])},
        optional={"text": _json, "image_url": _json, "refusal": _json, "signature": _json}),
        max_size=3)),
    "tool_calls": st.one_of(_json, st.lists(_call, max_size=3)),
    "tool_call_id": st.one_of(st.text(max_size=6), _scalar),
    "name": _json, "reasoning_content": _json, "reasoning_details": _json,
    "thinking_blocks": _json})
_item = st.fixed_dictionaries({}, optional={
    "type": st.one_of(st.sampled_from(["message", "function_call", "function_call_output",
                                       "reasoning", "custom_tool_call", "compaction",
                                       "item_reference", "shell_call"]), _scalar),
    "role": st.one_of(st.sampled_from(["user", "assistant", "system", "developer", "tool"]), _scalar),
    "content": _json, "call_id": st.one_of(st.text(max_size=6), _scalar), "id": _json,
    "name": _json, "arguments": _json, "output": _json, "summary": _json,
    "encrypted_content": _json})
_command = st.sampled_from([[], [{"role": "user", "content": "/compact"}],
                            [{"role": "user", "content": "/compact   focus here"}]])


def _checked(proxy, answer: httpx.Response) -> None:
    assert not proxy.logs.events("unhandled_error"), proxy.logs.events("unhandled_error")
    assert answer.status_code < 500, answer.text
    if answer.headers.get("content-type", "").startswith("application/json"):
        body = answer.json()
        if answer.status_code >= 400:
            assert set(body["error"]) >= {"message", "type", "param", "code"}


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          max_examples=80)
@given(messages=st.lists(_chat_message, max_size=6), tail=_command,
       extra=st.dictionaries(st.sampled_from(["tools", "stream", "max_tokens", "stream_options",
                                              "prompt_cache_key", "metadata"]), _json, max_size=3))
def test_any_chat_body(proxy, fake, messages: list[Any], tail: list[Any],
                       extra: dict[str, Any]) -> None:
    body = {"model": "gpt-4o", "messages": [*messages, *tail], **extra}
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=30,
                        headers={"x-thread-id": "hostile"})
    _checked(proxy, answer)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          max_examples=60)
@given(items=st.one_of(st.lists(_item, max_size=6), st.text(max_size=20)),
       extra=st.dictionaries(st.sampled_from(["tools", "stream", "store", "include",
                                              "instructions", "previous_response_id"]), _json,
                             max_size=3))
def test_any_responses_body(proxy, fake, items: Any, extra: dict[str, Any]) -> None:
    body = {"model": "gpt-4o", "input": items, "prompt_cache_key": "hostile", **extra}
    answer = httpx.post(f"{proxy.base_url}/responses", json=body, timeout=30)
    _checked(proxy, answer)
