"""`n=2` and `logprobs` through the official client: every choice relayed as sent, and the next
turn anchored whichever choice the client keeps (SPEC §3, §6)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from aiohttp import web

from tests.harness import COUNTED
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

USER = {"role": "user", "content": "Name a colour."}
SHORT = "Red."
LONG = "Blue, " + "a deep and quiet blue, " * 60
PROMPT, COMPLETION = 700, 900  # what the upstream reports: far from the proxy's own count
HEADERS = {"x-request-id": "req_abc123", "openai-processing-ms": "42",
           "x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999",
           "x-ratelimit-reset-requests": "6ms", "x-ratelimit-remaining-tokens": "29000"}
LOGPROBS = {"content": [{"token": "Red", "logprob": -0.01, "bytes": [82, 101, 100],
                         "top_logprobs": []}], "refusal": None}


def _usage() -> dict[str, Any]:
    return {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION,
            "total_tokens": PROMPT + COMPLETION}


def _message(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "refusal": None, "annotations": []}


def _body() -> dict[str, Any]:
    return {"id": "chatcmpl-two", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": i, "message": _message(text),
                         "logprobs": LOGPROBS if i == 0 else None, "finish_reason": "stop"}
                        for i, text in enumerate((SHORT, LONG))],
            "usage": _usage()}


def _chunks(include_usage: bool) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-two", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o"}
    out = []
    for i, text in enumerate((SHORT, LONG)):
        out.append({**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}]})
    for piece in range(0, len(LONG), 40):  # interleaved, as upstream sends them
        for i, text in enumerate((SHORT, LONG)):
            if piece < len(text):
                out.append({**base, "choices": [{
                    "index": i, "delta": {"content": text[piece:piece + 40]},
                    "logprobs": LOGPROBS if i == 0 else None, "finish_reason": None}]})
    for i in (0, 1):
        out.append({**base, "choices": [{"index": i, "delta": {}, "logprobs": None,
                                         "finish_reason": "stop"}]})
    if include_usage:
        out = [{**c, "usage": None} for c in out] + [{**base, "choices": [], "usage": _usage()}]
    return out


async def _two_choices(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        return web.json_response(_body(), headers=HEADERS)
    response = web.StreamResponse(headers={"content-type": "text/event-stream", **HEADERS})
    await response.prepare(request)
    include_usage = (body.get("stream_options") or {}).get("include_usage") is True
    for chunk in _chunks(include_usage):
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


def _answer(client: openai.OpenAI, stream: bool) -> list[dict[str, Any]]:
    """Each choice's message as the client keeps it."""
    thread = {"x-thread-id": "two-choices"}
    if not stream:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[USER], n=2, logprobs=True, extra_headers=thread)
        assert {k: raw.headers[k] for k in HEADERS} == HEADERS
        done = raw.parse()
        assert done.choices[0].logprobs.content[0].token == "Red"
        return [c.message.model_dump(exclude_none=True) for c in done.choices]
    texts = ["", ""]
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=[USER], n=2,
                                                 logprobs=True, stream=True, extra_headers=thread))
    assert all(c.usage is None for c in chunks), "usage nobody asked for is hidden"
    assert any(c.choices[0].logprobs for c in chunks if c.choices)
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    return [{"role": "assistant", "content": text} for text in texts]


@pytest.mark.parametrize("kept", [0, 1])
@pytest.mark.parametrize("stream", [False, True])
def test_the_choice_the_client_keeps_is_anchored(make_upstream, make_proxy, make_client,
                                                 stream: bool, kept: int) -> None:
    upstream = make_upstream(_two_choices)
    proxy = make_proxy(upstream.url, tokens=COUNTED)
    client = make_client(proxy.base_url)
    choices = _answer(client, stream)
    assert [c["content"] for c in choices] == [SHORT, LONG]
    follow = [USER, choices[kept], {"role": "user", "content": "Why?"}]
    client.chat.completions.create(model="gpt-4o", messages=follow,
                                   extra_headers={"x-thread-id": "two-choices"})
    line = proxy.requests()[-1]
    assert line["anchor_used"] is True
    # The usage counts both choices' output; only the kept one is context now.
    own = proxy.requests()[-1]["tokens_estimate"] - PROMPT
    assert 0 < own < COMPLETION * (0.6 if kept else 0.05)
