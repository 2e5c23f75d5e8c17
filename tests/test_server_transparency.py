"""Transparency (SPEC §11): what the proxy has no reason to change reaches upstream as sent."""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.testing import integer_options
from tests.conftest import API_KEY

_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                       st.floats(allow_nan=False, allow_infinity=False, width=32),
                       st.text(max_size=30))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
# Not the keys the proxy reads, nor those the fake checks as OpenAI does (`n: []` is its
# 400 `invalid_type`, as OpenAI's): a value of any shape under them is not a valid request.
_extra_keys = st.text(min_size=1, max_size=10).filter(
    lambda k: k not in {"model", "messages", "stream", "stream_options", "role", "content",
                        "tool_calls", "tool_call_id", "reasoning_content", "reasoning",
                        "reasoning_details", "thinking_blocks", "extra_content", "name",
                        "tools", "input", "instructions", *integer_options.CHAT})
_text = st.text(min_size=1, max_size=200)


@st.composite
def _message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "user", "assistant", "developer"]))
    if role == "user" and draw(st.booleans()):
        content: Any = [{"type": "text", "text": draw(_text)}]
    else:
        content = draw(_text)
    message = {"role": role, "content": content}
    message.update(draw(st.dictionaries(_extra_keys, _json, max_size=2)))
    return message


@st.composite
def request_bodies(draw: st.DrawFn) -> dict[str, Any]:
    messages = draw(st.lists(_message(), min_size=1, max_size=5))
    messages.append({"role": "user", "content": draw(_text)})
    body = {"model": draw(st.sampled_from(["gpt-4o", "gpt-4.1-mini", "my-local/model"])),
            "messages": messages}
    body.update(draw(st.dictionaries(_extra_keys, _json, max_size=3)))
    keys = list(body)
    order = draw(st.permutations(keys))
    return {k: body[k] for k in order}


def _serialize(body: dict[str, Any], style: str) -> bytes:
    if style == "compact":
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    if style == "spaced":
        return json.dumps(body).encode()
    return json.dumps(body, indent=2, ensure_ascii=False).encode()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(body=request_bodies(), style=st.sampled_from(["compact", "spaced", "indented"]))
def test_upstream_receives_exactly_what_the_client_sent(proxy, fake, body: dict[str, Any],
                                                        style: str) -> None:
    sent = _serialize(body, style)
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=sent,
                        headers={"content-type": "application/json",
                                 "authorization": f"Bearer {API_KEY}",
                                 "x-thread-id": "transparency"})
    assert answer.status_code == 200, answer.text
    assert fake.last("/chat/completions").body == sent


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=15)
@given(body=request_bodies(), style=st.sampled_from(["compact", "spaced"]))
def test_a_stream_gains_only_the_usage_request(proxy, fake, body: dict[str, Any],
                                               style: str) -> None:
    body = {"stream": True, **body}
    sent = _serialize(body, style)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=sent,
                      headers={"content-type": "application/json"}) as answer:
        received_stream = answer.read()
    assert answer.status_code == 200
    received = fake.last("/chat/completions").body
    assert received == b'{"stream_options":{"include_usage":true},' + sent[1:]
    assert b'"choices":[]' not in received_stream, "the usage chunk the client did not ask for"
    assert b'"usage"' not in received_stream, "nor the null usage of every other chunk"


def test_a_client_asking_for_usage_gets_it(proxy, fake) -> None:
    body = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi"}]}
    sent = json.dumps(body).encode()
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=sent,
                      headers={"content-type": "application/json"}) as answer:
        frames = answer.read()
    assert fake.last("/chat/completions").body == sent
    assert b'"choices":[]' in frames and b'"usage":{' in frames
