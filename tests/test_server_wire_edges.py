"""The wire's odd corners: encoded and dotted paths, compressed bodies, `Expect`, very deep JSON,
streams that break inside an event, Responses streams that stall before their first real event."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import httpx
import openai
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.harness import LoopThread, serve_every_path

USER = [{"role": "user", "content": "Say hello."}]
CHAT = {"model": "gpt-4o", "messages": USER}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Upstream:
    """An upstream whose answer each test writes; it records what reached it, as sent."""

    url: str
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def make_upstream(loop_thread: LoopThread) -> Iterator[Callable[[Handler], Upstream]]:
    runners: list[web.AppRunner] = []

    def make(answer: Handler) -> Upstream:
        upstream = Upstream("")

        async def record(request: web.Request) -> web.StreamResponse:
            upstream.seen.append((request.method, request.raw_path,
                                  {k.lower(): v for k, v in request.headers.items()},
                                  await request.read()))
            return await answer(request)

        port = loop_thread.run(serve_every_path(record, runners))
        upstream.url = f"http://127.0.0.1:{port}/tenant-a/v1"
        return upstream

    yield make
    for runner in runners:
        loop_thread.run(runner.cleanup())


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.json_response({"object": "list", "data": []})


def _raw_request(port: int, method: str, path: str, body: bytes = b"",
                 headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A request whose path goes out exactly as written (HTTP clients normalize `..`)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@pytest.mark.parametrize("path", [
    "/v1/../../tenant-b/v1/models",
    "/v1/%2e%2e/%2E%2E/admin/keys?x=1",
    "/v1/..%2f..%2fadmin/keys",
    "/v1/models/..%5c..%5cadmin",
    "/v1/./models",
    "/v1/chat/../chat/completions",
])
def test_dot_segments_are_refused_and_never_leave_the_base_path(make_upstream, make_proxy,
                                                               path) -> None:
    upstream = make_upstream(_ok)
    proxy = make_proxy(upstream.url, upstreams={"fake": {"api_key": "sk-proxy-own-key"}})
    status, body = _raw_request(proxy.port, "POST" if "chat" in path else "GET", path,
                                json.dumps(CHAT).encode(), {"content-type": "application/json"})
    assert status in (400, 404), body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] in ("invalid_path", "not_found")
    assert upstream.seen == []


@pytest.mark.parametrize("path", [
    "/v1/models/meta-llama%2FLlama-3.1-8B",
    "/v1/files/a%23b/content",
    "/v1/files/%3F/content?purpose=a%20b&x=%7E&y=%2F",
    "/v1/files/a%2541",
    "/v1/models",
])
def test_paths_and_queries_reach_upstream_as_the_client_encoded_them(make_upstream, make_proxy,
                                                                     path) -> None:
    upstream = make_upstream(_ok)
    proxy = make_proxy(upstream.url)
    status, _ = _raw_request(proxy.port, "GET", path)
    assert status == 200
    assert upstream.seen[-1][1] == "/tenant-a" + path


def test_the_pipeline_routes_forward_their_query_as_sent(make_upstream, make_proxy) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response({"id": "c", "object": "chat.completion", "created": 1,
                                  "model": "gpt-4o", "choices": [{
                                      "index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "Hi."}}]})

    upstream = make_upstream(answer)
    proxy = make_proxy(upstream.url)
    status, _ = _raw_request(proxy.port, "POST", "/v1/chat/completions?api-version=2024%2D10",
                             json.dumps(CHAT).encode(), {"content-type": "application/json"})
    assert status == 200
    assert upstream.seen[-1][1] == "/tenant-a/v1/chat/completions?api-version=2024%2D10"


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_request_body_goes_upstream_inflated_and_labelled_so(proxy, fake, path,
                                                                          encoding) -> None:
    plain = json.dumps({**CHAT, "input": "x"}).encode()
    packed = gzip.compress(plain) if encoding == "gzip" else _deflate(plain)
    answer = httpx.post(f"{proxy.base_url}{path}", content=packed, timeout=20,
                        headers={"content-type": "application/json",
                                 "content-encoding": encoding})
    assert answer.status_code == 200, answer.text
    sent = fake.last(path)
    assert sent.body == plain
    assert "content-encoding" not in sent.headers


def _deflate(data: bytes) -> bytes:
    import zlib
    return zlib.compress(data)


def test_a_body_that_is_not_what_its_encoding_says_is_400(proxy, fake) -> None:
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=json.dumps(CHAT).encode(),
                        headers={"content-type": "application/json",
                                 "content-encoding": "gzip"}, timeout=20)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_body_encoding"
    assert fake.requests == []
    line = proxy.requests()[-1]
    assert (line["status"], line["error"]) == (400, "invalid_body_encoding")


def test_expect_continue_is_answered_by_the_proxy_not_forwarded(proxy, fake) -> None:
    status, body = _raw_request(proxy.port, "POST", "/v1/chat/completions",
                                json.dumps(CHAT).encode(),
                                {"content-type": "application/json",
                                 "expect": "100-continue"})
    assert status == 200, body
    assert "expect" not in fake.last().headers


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_json_nested_beyond_the_parsers_is_a_clear_400(proxy, fake) -> None:
    body = ('{"model": "gpt-4o", "metadata": ' + _nested(5000) + ', "messages": '
            + json.dumps(USER) + "}")
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=body.encode(),
                        headers={"content-type": "application/json"}, timeout=20)
    assert answer.status_code == 400
    assert "nested too deeply" in answer.json()["error"]["message"]
    assert fake.requests == []


def test_json_nested_beyond_the_parsers_is_still_forwarded_on_other_paths(make_upstream,
                                                                          make_proxy) -> None:
    upstream = make_upstream(_ok)
    proxy = make_proxy(upstream.url)
    body = ('{"model": "text-embedding-3-small", "input": ' + _nested(5000) + "}").encode()
    answer = httpx.post(f"{proxy.base_url}/embeddings", content=body, timeout=20,
                        headers={"content-type": "application/json"})
    assert answer.status_code == 200
    assert upstream.seen[-1][3] == body


def test_an_invalid_stream_options_goes_up_as_sent(proxy, fake) -> None:
    body = json.dumps({**CHAT, "stream": True, "stream_options": "x"}).encode()
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=body, timeout=20,
                      headers={"content-type": "application/json"}) as answer:
        answer.read()
    assert fake.last().body == body


def _chunk(text: str) -> bytes:
    return b"data: " + json.dumps({
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}).encode() \
        + b"\n\n"


@pytest.mark.parametrize("partial", [b"partial", b'data: {"id":"c","obj', b"data: {}\n"])
def test_a_stream_cut_inside_an_event_ends_with_an_error_the_sdk_raises(make_upstream,
                                                                        make_proxy,
                                                                        partial) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_chunk("Hel"))
        await out.write(partial)
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return out

    received, error = _streamed_until_error(make_proxy(make_upstream(answer).url))
    assert "mid-stream" in str(error)
    assert received == ["Hel"]


def _streamed_until_error(proxy) -> tuple[list[str | None], openai.APIError]:
    """What the SDK yielded of a chat stream before it raised, and what it raised."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in client.chat.completions.create(model="gpt-4o", messages=USER, stream=True):
            received.append(chunk.choices[0].delta.content if chunk.choices else None)
    client.close()
    return received, caught.value


def _event(kind: str, **fields: object) -> bytes:
    return (f"event: {kind}\ndata: " + json.dumps({"type": kind, **fields}) + "\n\n").encode()


def test_a_responses_stream_is_relayed_while_its_first_real_event_is_slow(make_upstream,
                                                                          make_proxy,
                                                                          loop_thread) -> None:
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_event("response.created", sequence_number=0,
                               response={"id": "resp_1", "status": "in_progress"}))
        await asyncio.wait_for(release.wait(), 30)
        await out.write(_event("response.output_text.delta", sequence_number=1, delta="Hi"))
        return out

    proxy = make_proxy(make_upstream(answer).url)
    body = {"model": "gpt-4o", "input": "hi", "stream": True}
    with httpx.stream("POST", f"{proxy.base_url}/responses", json=body, timeout=20) as stream:
        lines = stream.iter_lines()
        assert stream.status_code == 200
        assert next(lines) == "event: response.created"  # arrives without the next event
        loop_thread.run(_set(release))
        rest = "\n".join(lines)
    assert "response.output_text.delta" in rest


async def _set(event: asyncio.Event) -> None:
    event.set()


def test_a_responses_stream_that_goes_silent_before_its_first_real_event_is_504(
        make_upstream, make_proxy) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_event("response.created", sequence_number=0,
                               response={"id": "resp_1", "status": "in_progress"}))
        await asyncio.sleep(1.5)  # five times the proxy's timeout; the teardown waits it out
        return out

    proxy = make_proxy(make_upstream(answer).url, upstreams={"fake": {"timeout_s": 0.3}})
    answer_ = httpx.post(f"{proxy.base_url}/responses", timeout=20,
                         json={"model": "gpt-4o", "input": "hi", "stream": True})
    assert answer_.status_code == 504
    assert answer_.json()["error"]["code"] == "upstream_timeout"


def test_integers_beyond_64_bits_keep_their_digits_when_fields_are_rewritten(proxy, fake) -> None:
    # The proxy rewrites the top-level fields here (it adds include_usage to the client's
    # stream_options); orjson alone would have turned these integers into floats.
    body = ('{"model": "gpt-4o", "stream": true, "stream_options": {"include_obfuscation": '
            'false}, "seed": 123456789012345678901234567890, "metadata": {"n": '
            '18446744073709551616, "m": -9223372036854775809}, "messages": '
            + json.dumps(USER) + "}").encode()
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=body, timeout=20,
                      headers={"content-type": "application/json"}) as answer:
        answer.read()
    sent = json.loads(fake.last().body)
    assert sent["seed"] == 123456789012345678901234567890
    assert sent["metadata"] == {"n": 18446744073709551616, "m": -9223372036854775809}
    assert sent["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_an_upstream_that_rejects_stream_options_gets_streams_as_sent(make_fake,
                                                                      make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, upstreams={"fake": {"stream_usage": False}})
    body = json.dumps({**CHAT, "stream": True}).encode()
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=body, timeout=20,
                      headers={"content-type": "application/json",
                               "x-thread-id": "no-usage"}) as answer:
        frames = answer.read()
    assert answer.status_code == 200 and b"[DONE]" in frames
    assert fake.last().body == body
    assert "usage_input" not in proxy.requests()[-1]


def _usage_chunk() -> bytes:
    return (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o",'
            b'"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}'
            b"\n\n")


@pytest.mark.parametrize("media", ["Text/Event-Stream", "TEXT/EVENT-STREAM; charset=utf-8"])
def test_an_event_stream_in_any_case_is_relayed_as_it_comes_with_usage_hidden(
        make_upstream, make_proxy, loop_thread, media) -> None:
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        assert json.loads(await request.read())["stream_options"] == {"include_usage": True}
        out = web.StreamResponse(headers={"Content-Type": media})
        await out.prepare(request)
        await out.write(_chunk("Hel"))
        await asyncio.wait_for(release.wait(), 30)
        await out.write(_chunk("lo") + _usage_chunk() + b"data: [DONE]\n\n")
        return out

    proxy = make_proxy(make_upstream(answer).url)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={**CHAT, "stream": True}) as stream:
        lines = stream.iter_lines()
        first = next(lines)  # arrives while the upstream still holds the rest
        loop_thread.run(_set(release))
        rest = "\n".join(lines)
    assert '"Hel"' in first and '"lo"' in rest and rest.strip().endswith("data: [DONE]")
    assert "usage" not in first + rest


def test_a_null_usage_that_comes_first_in_a_chunk_is_hidden_too(make_upstream,
                                                                 make_proxy) -> None:
    chunk = (b'data: {"usage":null,"id":"c","object":"chat.completion.chunk","created":1,'
             b'"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hi"},'
             b'"finish_reason":null}]}\n\n')

    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(chunk + _usage_chunk() + b"data: [DONE]\n\n")
        return out

    proxy = make_proxy(make_upstream(answer).url)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={**CHAT, "stream": True}) as stream:
        received = stream.read()
    assert received == chunk.replace(b'"usage":null,', b"") + b"data: [DONE]\n\n"


@pytest.mark.parametrize("partial", [b'data: {"id":"c","obj', b"data: {}", b"event: mess"])
def test_a_stream_that_ends_cleanly_inside_an_event_ends_with_an_error_the_sdk_raises(
        make_upstream, make_proxy, partial) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_chunk("Hel") + partial)
        return out  # the chunked body ends properly: no connection error to see

    proxy = make_proxy(make_upstream(answer).url)
    received, error = _streamed_until_error(proxy)
    assert "mid-stream" in str(error) and received == ["Hel"]
    assert proxy.requests()[-1]["upstream_error"] == "upstream ended the stream inside an event"


def test_a_last_event_without_its_blank_line_is_not_taken_for_a_cut(make_upstream,
                                                                     make_proxy) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_chunk("Hel") + b"data: [DONE]\n")
        return out

    proxy = make_proxy(make_upstream(answer).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True))
    client.close()
    assert [c.choices[0].delta.content for c in chunks] == ["Hel"]
    assert "upstream_error" not in proxy.requests()[-1]


@pytest.mark.parametrize("sent", [{}, {"User-Agent": "sdk/1"}, {"Accept-Encoding": "br"},
                                  {"User-Agent": "sdk/1", "Accept-Encoding": "br"}])
def test_aiohttp_adds_no_user_agent_or_accept_encoding_of_its_own(make_upstream, make_proxy,
                                                                  sent) -> None:
    upstream = make_upstream(_ok)
    proxy = make_proxy(upstream.url)
    head = "".join(f"{name}: {value}\r\n" for name, value in sent.items())
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as client:
        client.sendall(f"GET /v1/models HTTP/1.1\r\nHost: proxy\r\n{head}"
                       "Connection: close\r\n\r\n".encode())
        while client.recv(65536):
            pass
    seen = upstream.seen[-1][2]
    assert seen.get("user-agent") == sent.get("User-Agent")
    assert seen.get("accept-encoding") == sent.get("Accept-Encoding")
