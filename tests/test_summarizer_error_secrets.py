"""A summarizer's error body may echo the credential it was sent (some gateways quote the key
they refuse). The proxy quotes that body in the client's 503 and on `compaction_failed`: the
very credentials the summary call carried, the proxy's own `api_key` or the client's, are
masked there in whatever form (only `sk-` keys, bearer tokens and header lines were before)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from aiohttp import web

from proxy.redaction import sent_secrets, without_secrets
from proxy.testing.summarizer import is_summarizer_request
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

KEYS = ["gsk_LiveProxyKey0123456789ABCDEFGHIJ", "0123456789abcdef0123456789abcdef",
        "AIzaSyProxyKey0123456789abcdefghijklm"]
CLIENT_KEY = "client-key-0123456789"


def test_the_sent_secrets_are_masked_in_any_form() -> None:
    secrets = sent_secrets({"Authorization": f"Bearer {CLIENT_KEY}", "api-key": KEYS[1]}, KEYS[0])
    assert secrets == sorted([KEYS[0], KEYS[1], CLIENT_KEY], key=len, reverse=True)
    text = f"bad keys: {KEYS[0]}, {KEYS[1]} and {CLIENT_KEY}."
    assert without_secrets(text, secrets) == "bad keys: ***, *** and ***."
    assert without_secrets("a short word: abc", ["abc"]) == "a short word: abc"


async def _echoing(request: web.Request) -> web.Response:
    body = await request.json()
    if is_summarizer_request(body):
        token = request.headers.get("Authorization", "").split(" ", 1)[-1]
        return web.json_response({"error": {"message": f"Invalid API key {token}",
                                            "type": "invalid_request_error",
                                            "code": "invalid_api_key"}}, status=401)
    return web.json_response({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}})


def _long(turns: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"turn {i} " + "lorem ipsum dolor sit amet " * 60} for i in range(turns)]


@pytest.mark.parametrize("key", KEYS)
def test_a_summarizer_echoing_the_proxys_key_never_shows_it(make_upstream, make_proxy,  # noqa: F811
                                                            key: str) -> None:
    upstream = make_upstream(_echoing)
    proxy = make_proxy(upstream.url, upstreams={"fake": {"api_key": key}},
                       models={"small-*": {"max_input_tokens": 4_000}})
    answers = [httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                          headers={"authorization": f"Bearer {CLIENT_KEY}",
                                   "x-thread-id": f"echo-{turns}"},
                          json={"model": "small-1", "messages": _long(turns)})
               for turns in (11, 21)]  # fits the window (degraded), and does not (503)
    assert [a.status_code for a in answers] == [200, 503]
    assert "Invalid API key ***" in answers[1].json()["error"]["message"]
    failed = proxy.logs.events("compaction_failed")
    assert len(failed) == 2 and all("Invalid API key ***" in e["error"] for e in failed)
    everything = json.dumps(proxy.logs.lines) + "".join(a.text for a in answers)
    assert key not in everything and CLIENT_KEY not in everything
