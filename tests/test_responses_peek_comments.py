"""The Responses peek reads past keep-alive comments (OpenRouter sends `: OPENROUTER
PROCESSING` while a request waits) as past the lifecycle events: an error event after one is
still seen before anything is relayed, and still buys its retry."""

from __future__ import annotations

import json

import httpx
import pytest
from aiohttp import web

from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

CREATED = (b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
           b'"response":{"id":"r","status":"in_progress"}}\n\n')
REJECTED = b"event: error\ndata: " + json.dumps({
    "type": "error", "sequence_number": 1, "error": {
        "type": "invalid_request_error", "code": "invalid_encrypted_content",
        "message": "The encrypted content could not be verified.", "param": None}}).encode() \
    + b"\n\n"


@pytest.mark.parametrize("comment", [b": OPENROUTER PROCESSING\n\n", b":\r\n\r\n",
                                     b"event: ping\n\n"])
def test_an_error_event_after_a_comment_is_still_retried(make_upstream, make_proxy,  # noqa: F811
                                                         comment: bytes) -> None:
    seen: list[int] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(1)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(CREATED + comment + REJECTED)
        return out

    proxy = make_proxy(make_upstream(answer).url)
    items = [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "blob"},
             {"type": "message", "role": "user", "content": "hi"}]
    with httpx.stream("POST", f"{proxy.base_url}/responses", timeout=20,
                      json={"model": "gpt-4o", "input": items, "stream": True}) as answer_:
        answer_.read()
    assert proxy.requests()[-1].get("retried") == "encrypted reasoning rejected"
    assert len(seen) == 2
