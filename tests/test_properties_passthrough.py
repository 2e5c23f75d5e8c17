"""Every other `/v1/*` path is forwarded untouched (SPEC §10, §11), on the real server.

Drawn: a method, a path under `/v1/` of any segments (percent-escapes among them: an escaped
slash, a space, CJK), a query, a body of any bytes with any content type, and the upstream's
answer (status, body). The upstream sees the method, the path and query as the client wrote
them, and the body byte for byte; the client gets the upstream's status and body byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.edge_checks import ScriptedUpstream
from tests.edge_inputs import Answer
from tests.harness import LoopThread

_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
_segment = st.lists(st.sampled_from(("models", "files", "embeddings", "vector_stores", "batches", "file-7Qx2",
                                     "gpt-4o", "a_b-c~d", "%2F", "%20", "%E6%95%B0", "v1", "x.y", "1")),
                    min_size=1, max_size=3).map("".join)
_query = st.lists(st.tuples(st.sampled_from(("limit", "after", "order", "model", "q")),
                            st.sampled_from(("1", "desc", "gpt-4o", "a%20b", "%E6%95%B0", ""))),
                  max_size=3).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
# The two pipeline paths are the proxy's own (SPEC §10): everything else is passed through.
_OWN = ("chat/completions", "responses")


class RecordingUpstream(ScriptedUpstream):
    """The scripted upstream, keeping what each request was."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, bytes]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.raw_path, await request.read()))
        return await super()._handle(request)


@pytest.fixture
def recording(loop_thread: LoopThread, make_proxy) -> Iterator[tuple[Any, RecordingUpstream]]:
    upstream = RecordingUpstream()
    loop_thread.run(upstream.start())
    yield make_proxy(upstream.url), upstream
    loop_thread.run(upstream.stop())


@st.composite
def passthrough_requests(draw: st.DrawFn) -> tuple[str, str, bytes, str]:
    tail = "/".join(draw(st.lists(_segment, min_size=1, max_size=4)))
    if tail in _OWN:
        tail = f"{tail}/x"
    query = draw(_query)
    method = draw(st.sampled_from(("GET", "POST", "DELETE", "PUT", "PATCH")))
    body = b"" if method in ("GET", "DELETE") else draw(st.one_of(
        st.binary(max_size=200), st.just(b'{"model": "gpt-4o", "input": ["a", "\\u6570"]}')))
    kind = draw(st.sampled_from(("application/json", "application/octet-stream", "text/plain; charset=utf-8")))
    return method, tail + (f"?{query}" if query else ""), body, kind


@settings(suppress_health_check=_FIXTURES, max_examples=30)
@given(request=passthrough_requests(), status=st.sampled_from((200, 201, 204, 400, 404, 500)),
       answer=st.binary(max_size=200))
def test_any_other_v1_request_goes_and_comes_back_untouched(recording, request: tuple, status: int,
                                                            answer: bytes) -> None:
    proxy, upstream = recording
    method, target, body, kind = request
    answer = b"" if status == 204 else answer
    upstream.answer = Answer(status, "application/octet-stream", (answer,) if answer else ())
    before = len(upstream.seen)
    got = httpx.request(method, f"{proxy.url}/v1/{target}", content=body, timeout=30,
                        headers={"content-type": kind, "authorization": "Bearer sk-pass"})
    assert upstream.seen[before:] == [(method, f"/v1/{target}", body)]
    assert (got.status_code, got.content) == (status, answer)
