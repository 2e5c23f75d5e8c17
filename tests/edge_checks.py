"""One hostile case run against the real server, and what its answer is held to.

Shared by the tests (`tests/test_hostile_http_edge.py`, few examples) and the long fuzz run
(`scripts/fuzz_edge.py`). The oracle: no crash and no 500 of the proxy's making (502/504 are its
documented upstream faults, 503 its shutdown and an open summarizer breaker), a proxy-made error
in OpenAI's shape, /healthz still fine, the thread's next well-formed request answered, and an
untouched request reaching upstream byte for byte.
"""

from __future__ import annotations

import http.client
from typing import Any

import httpx
from aiohttp import web

from proxy import jsonio
from tests.edge_inputs import PATHS, Answer, Turn

ERROR_FIELDS = {"message", "type", "param", "code"}
_USER = {"role": "user", "content": "Say hello."}
_OK = Answer(200, "application/json",
             (b'{"choices":[{"message":{"role":"assistant","content":"ok"}}]}',))


def post(proxy: Any, api: str, body: bytes, thread: str | None = None) -> httpx.Response:
    headers = {"content-type": "application/json", "authorization": "Bearer sk-a"}
    if thread is not None:
        headers["x-thread-id"] = thread
    return httpx.post(f"{proxy.base_url}/{PATHS[api][0]}", content=body, headers=headers,
                      timeout=30)


def crashes(proxy: Any) -> int:
    return len(proxy.logs.events("unhandled_error"))


def check_answer(proxy: Any, answer: httpx.Response, crashed_before: int,
                 upstream_status: int | None = None) -> None:
    found = proxy.logs.events("unhandled_error")
    assert len(found) == crashed_before, found[-1].get("exception")
    line = proxy.requests()[-1] if proxy.requests() else {}
    made_by_proxy = "error" in line and line.get("status") == answer.status_code
    if answer.status_code >= 500 and answer.status_code != upstream_status:
        assert answer.status_code in (502, 503, 504), (answer.status_code, answer.text)
    if made_by_proxy and answer.status_code >= 400 and answer.status_code != upstream_status:
        assert answer.headers.get("content-type", "").startswith("application/json")
        error = answer.json()["error"]
        assert set(error) >= ERROR_FIELDS, error
        assert isinstance(error["message"], str) and error["message"]


def check_healthy(proxy: Any, api: str, thread: str) -> None:
    assert httpx.get(f"{proxy.url}/healthz", timeout=10).status_code == 200
    key = PATHS[api][1]
    answer = post(proxy, api, jsonio.dumps({"model": "gpt-4o", key: [_USER]}), thread)
    assert answer.status_code == 200, answer.text


def run_body(proxy: Any, fake: Any, api: str, body: bytes, thread: str | None) -> None:
    seen, crashed = len(fake.requests), crashes(proxy)
    answer = post(proxy, api, body, thread)
    check_answer(proxy, answer, crashed)
    if answer.status_code == 400 and "error" in proxy.requests()[-1]:
        assert len(fake.requests) == seen  # refused by the proxy: nothing went upstream


def run_turns(proxy: Any, fake: Any, api: str, turns: list[Turn], thread: str) -> None:
    for turn in turns:
        seen, crashed = len(fake.requests), crashes(proxy)
        answer = post(proxy, api, turn.body, thread)
        check_answer(proxy, answer, crashed)
        untouched = answer.headers.get("x-compaction") == "none" and not _streams(turn.body)
        if untouched and len(fake.requests) > seen:
            assert fake.last().body == turn.body, turn.edit
    check_healthy(proxy, api, thread)


def _streams(body: bytes) -> bool:
    # A stream may go up with `stream_options.include_usage` added: not untouched.
    try:
        doc = jsonio.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def run_header_lines(proxy: Any, api: str, lines: list[tuple[bytes, bytes]],
                     body: bytes) -> None:
    crashed = crashes(proxy)
    status, text, content_type = _raw_post(proxy.port, f"/v1/{PATHS[api][0]}", body, lines)
    assert crashes(proxy) == crashed
    assert status < 500, text
    if status >= 400 and "error" in proxy.requests()[-1]:
        assert content_type.startswith("application/json")
        assert set(jsonio.loads(text)["error"]) >= ERROR_FIELDS
    assert httpx.get(f"{proxy.url}/healthz", timeout=10).status_code == 200


def _raw_post(port: int, path: str, body: bytes,
              lines: list[tuple[bytes, bytes]]) -> tuple[int, bytes, str]:
    """A POST whose header lines go out as the given bytes (clients refuse most of these)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in lines:
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, answer.read(), answer.getheader("content-type") or ""
    finally:
        connection.close()


class ScriptedUpstream:
    """An upstream that sends whatever `Answer` is set, in the chunks it is given."""

    def __init__(self) -> None:
        self.answer = _OK
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        answer = self.answer
        headers = {"Content-Type": answer.content_type} if answer.content_type else {}
        response = web.StreamResponse(status=answer.status, headers=headers)
        await response.prepare(request)
        for chunk in answer.chunks:
            await response.write(chunk)
        await response.write_eof()
        return response


def run_answer(proxy: Any, upstream: ScriptedUpstream, api: str, answer: Answer,
               stream: bool) -> None:
    upstream.answer, crashed = answer, crashes(proxy)
    key = PATHS[api][1]
    body = jsonio.dumps({"model": "gpt-4o", "stream": stream, key: [_USER]})
    with httpx.stream("POST", f"{proxy.base_url}/{PATHS[api][0]}", content=body, timeout=30,
                      headers={"content-type": "application/json", "x-thread-id": "odd"}) as got:
        got.read()
    check_answer(proxy, got, crashed, upstream_status=answer.status)
    if "error" not in proxy.requests()[-1]:
        assert got.status_code == answer.status  # relayed as the upstream sent it
    upstream.answer = _OK
    check_healthy(proxy, api, "odd")
