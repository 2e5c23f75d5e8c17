"""SPEC §9: one line per request with its usage. A Responses answer that failed (streamed as
`response.failed`, or a JSON response of status `failed`) still reports what it used: the line
says it, and that the response failed; nothing is anchored (no answer the client keeps). A
request that names no thread gets its usage on its line too (no anchor: no thread)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from aiohttp import web

from proxy.testing.replies import Reply
from tests.conftest import API_KEY
from tests.test_responses_stream_ends import STARTED, USAGE, _event, _opening
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import _lines

FAILED = {**STARTED, "status": "failed", "usage": USAGE,
          "error": {"code": "server_error", "message": "the model's answer failed"}}
BODY = {"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}]}
HEADERS = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "failed"}


def _streaming(body: bytes) -> Any:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(body)
        await out.write_eof()
        return out
    return answer


async def _failed_json(request: web.Request) -> web.Response:
    return web.json_response(FAILED)


def test_a_streamed_failure_reports_its_usage(make_upstream, make_proxy) -> None:  # noqa: F811
    sent = _opening() + _event("response.failed", 3, response=FAILED)
    proxy = make_proxy(make_upstream(_streaming(sent)).url)
    with httpx.stream("POST", f"{proxy.base_url}/responses", json={**BODY, "stream": True},
                      headers=HEADERS, timeout=20) as answer:
        assert answer.read() == sent
    [line] = _lines(proxy, 1)
    assert line["upstream_error"] == "error frame: server_error"
    assert (line["usage_input"], line["usage_output"]) == (9, 1)
    assert "the model's answer failed" not in json.dumps(line)


def test_a_failed_json_response_says_so_with_its_usage(make_upstream, make_proxy) -> None:  # noqa: F811
    proxy = make_proxy(make_upstream(_failed_json).url)
    answer = httpx.post(f"{proxy.base_url}/responses", json=BODY, headers=HEADERS, timeout=20)
    assert answer.status_code == 200 and answer.json() == FAILED
    [line] = _lines(proxy, 1)
    assert line["upstream_error"] == "response failed: server_error"
    assert (line["usage_input"], line["usage_output"]) == (9, 1)


def test_a_request_without_a_thread_has_its_usage_on_its_line(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, threads={"fallback": "none"})
    for stream in (False, True):
        fake.script(Reply.text("hello"))
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                "stream": stream}
        httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=20,
                   headers={"authorization": f"Bearer {API_KEY}"}).read()
    lines = _lines(proxy, 2)
    assert [line.get("thread") for line in lines] == [None, None]
    assert all(line["usage_input"] > 0 and line["usage_output"] > 0 for line in lines), lines
