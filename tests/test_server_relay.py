"""The proxy as a transparent relay, through the official `openai` client (sync and async)."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from proxy.server.services import SERVICES
from proxy.testing.replies import Reply, call
from tests.conftest import API_KEY
from tests.harness import COUNTED

USER = [{"role": "user", "content": "Say hello."}]


def test_plain_chat_sync(client: openai.OpenAI, fake) -> None:
    fake.script(Reply.text("Hello there."))
    answer = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert answer.choices[0].message.content == "Hello there."
    assert answer.usage is not None and answer.usage.prompt_tokens > 0
    assert fake.last("/chat/completions").json["messages"] == USER


async def test_plain_chat_async(aclient: openai.AsyncOpenAI, fake) -> None:
    fake.script(Reply.text("Hello, async."))
    answer = await aclient.chat.completions.create(model="gpt-4o", messages=USER)
    assert answer.choices[0].message.content == "Hello, async."


def test_stream_sync_arrives_whole(client: openai.OpenAI, fake) -> None:
    fake.script(Reply.text("One two three four five."))
    stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "One two three four five."


async def test_stream_async_arrives_whole(aclient: openai.AsyncOpenAI, fake) -> None:
    fake.script(Reply.text("Streaming through the proxy."))
    stream = await aclient.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
    parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert "".join(parts) == "Streaming through the proxy."


def test_tool_call_round_trip(client: openai.OpenAI, fake) -> None:
    fake.script(Reply.tool_calls(call("read_file", {"path": "src/app.py"}),
                                 call("grep", {"pattern": "TODO"})),
                Reply.text("The file has two TODOs."))
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("read_file", "grep")]
    first = client.chat.completions.create(model="gpt-4o", messages=USER, tools=tools)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and len(message.tool_calls) == 2
    history = [*USER, message.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": c.id, "content": "TODO x2"} for c in message.tool_calls]
    second = client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    assert second.choices[0].message.content == "The file has two TODOs."


async def test_tool_call_round_trip_streamed(aclient: openai.AsyncOpenAI, fake) -> None:
    fake.script(Reply.tool_calls(call("read_file", {"path": "a.py", "limit": 40})))
    stream = await aclient.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
    arguments = ""
    async for chunk in stream:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments += delta.function.arguments or ""
    assert arguments == '{"path":"a.py","limit":40}'


def test_upstream_error_arrives_unchanged(proxy, fake) -> None:
    body = {"error": {"message": "Rate limit reached for gpt-4o.", "type": "requests",
                      "param": None, "code": "rate_limit_exceeded"}}
    fake.script(Reply.error(429, body))
    direct = httpx.post(f"{fake.url}/chat/completions", json={"model": "gpt-4o", "messages": USER})
    fake.script(Reply.error(429, body))
    relayed = httpx.post(f"{proxy.base_url}/chat/completions",
                         json={"model": "gpt-4o", "messages": USER})
    assert relayed.status_code == direct.status_code == 429
    assert relayed.content == direct.content
    assert relayed.headers["content-type"] == direct.headers["content-type"]


def test_upstream_validation_error_reaches_the_sdk(client: openai.OpenAI, fake) -> None:
    bad = [*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x"}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=bad)
    assert caught.value.body["code"] == "invalid_type"
    assert "function.arguments" in caught.value.body["message"]


def test_other_v1_paths_are_forwarded(client: openai.OpenAI, fake) -> None:
    models = client.models.list()
    assert any(m.id for m in models.data)
    vectors = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(vectors.data) == 2
    assert fake.last("/embeddings").json["input"] == ["a", "b"]


def test_unknown_path_is_404(proxy) -> None:
    answer = httpx.get(f"{proxy.url}/nowhere")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


def test_wrong_method_is_405(proxy) -> None:
    answer = httpx.post(f"{proxy.url}/healthz")
    assert answer.status_code == 405
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


def test_malformed_json_is_400_and_never_forwarded(proxy, fake) -> None:
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=b'{"model": "gpt-4o", ',
                        headers={"content-type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert fake.requests == []


@pytest.mark.parametrize("body, param", [
    ({"messages": USER}, "model"),
    ({"model": "gpt-4o", "messages": "hi"}, "messages"),
    ({"model": "gpt-4o", "messages": [USER[0], 7]}, "messages.[1]"),
])
def test_unusable_request_is_400_naming_the_parameter(proxy, fake, body, param) -> None:
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
    assert fake.requests == []


def test_body_over_the_limit_is_413_and_never_forwarded(make_proxy, fake) -> None:
    proxy = make_proxy(fake, server={"max_body_mb": 1})
    big = [{"role": "user", "content": "x" * (1024 * 1024 + 10)}]
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json={"model": "gpt-4o", "messages": big})
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "request_too_large"
    assert fake.requests == []
    line = proxy.requests()[-1]
    assert (line["status"], line["error"]) == (413, "request_too_large")


def test_unreachable_upstream_is_502(make_proxy, make_client) -> None:
    proxy = make_proxy("http://127.0.0.1:9/v1")
    client = make_client(proxy.base_url)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_unreachable"


def test_upstream_timeout_is_504(make_proxy, fake) -> None:
    proxy = make_proxy(fake, upstreams={"fake": {"timeout_s": 0.5}})
    fake.script(Reply.hang())
    started = time.monotonic()
    answer = httpx.post(f"{proxy.base_url}/chat/completions",
                        json={"model": "gpt-4o", "messages": USER}, timeout=10)
    assert answer.status_code == 504
    assert answer.json()["error"]["code"] == "upstream_timeout"
    assert time.monotonic() - started < 5


def test_client_disconnect_cancels_the_upstream_request(proxy, fake) -> None:
    fake.script(Reply.hang(after=1))
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions",
                      json={"model": "gpt-4o", "messages": USER, "stream": True}) as response:
        first = next(response.iter_bytes())
        assert first.startswith(b"data: ")
    deadline = time.monotonic() + 5
    while not fake.peer_gone and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.peer_gone == ["/v1/chat/completions"]
    while not proxy.requests() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.requests()[-1]["status"] == 499


def test_upstream_dying_mid_stream_ends_the_stream_with_an_error(client: openai.OpenAI, fake,
                                                                 proxy) -> None:
    fake.script(Reply.die(after=2))
    stream = client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received.append(chunk)
    assert received, "the chunks sent before the failure still arrive"
    assert "mid-stream" in str(caught.value)
    assert httpx.get(f"{proxy.url}/healthz").json() == {"status": "ok"}
    fake.script(Reply.text("Still here."))
    again = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert again.choices[0].message.content == "Still here."


def test_upstream_key_replaces_the_client_credential(make_fake, make_proxy, make_client) -> None:
    fake = make_fake(api_key="sk-upstream-secret-key")
    proxy = make_proxy(fake, upstreams={"fake": {"api_key": "sk-upstream-secret-key"}})
    client = make_client(proxy.base_url, "sk-client-key-1234")
    assert client.chat.completions.create(model="gpt-4o", messages=USER).choices
    assert fake.last().headers["authorization"] == "Bearer sk-upstream-secret-key"


def test_client_credential_is_forwarded_without_an_upstream_key(client: openai.OpenAI, fake) -> None:
    client.chat.completions.create(model="gpt-4o", messages=USER)
    assert fake.last().headers["authorization"] == f"Bearer {API_KEY}"


def test_hop_by_hop_headers_do_not_cross(proxy, fake) -> None:
    httpx.post(f"{proxy.base_url}/chat/completions", json={"model": "gpt-4o", "messages": USER},
               headers={"Connection": "keep-alive, x-private-hop", "x-private-hop": "1",
                        "Proxy-Authorization": "Basic abc", "x-custom": "kept"})
    sent = fake.last().headers
    assert sent["x-custom"] == "kept"
    assert "x-private-hop" not in sent and "proxy-authorization" not in sent


def test_upstream_cookies_reach_their_client_and_are_never_replayed(make_proxy,
                                                                   loop_thread) -> None:
    # API hosts set cookies (Cloudflare's, on api.openai.com). A client jar shared by every
    # tenant would send one client's cookie with everybody's next requests.
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        return web.json_response(
            {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "Hi."}}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}},
            headers={"Set-Cookie": f"__cf_bm=client-{len(seen)}; Path=/; HttpOnly"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    app.router.add_get("/v1/models", answer)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> int:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner.addresses[0][1]

    port = loop_thread.run(start())
    try:
        # A host name, not an address: cookie jars keep cookies of named hosts only.
        proxy = make_proxy(f"http://localhost:{port}/v1")
        body = {"model": "gpt-4o", "messages": USER}
        answers = [httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=20,
                              headers={"Authorization": f"Bearer sk-tenant-{n}"})
                   for n in range(2)]
        answers.append(httpx.get(f"{proxy.base_url}/models", timeout=20))
        assert [a.headers.get("set-cookie", "").split(";")[0] for a in answers] == [
            "__cf_bm=client-1", "__cf_bm=client-2", "__cf_bm=client-3"]
        assert seen == [None, None, None]
    finally:
        loop_thread.run(runner.cleanup())


def test_request_line_has_the_facts_and_no_credential(client: openai.OpenAI, proxy, fake) -> None:
    client.chat.completions.create(model="gpt-4o", messages=USER, extra_headers={"x-thread-id": "t-42"})
    fake.script(Reply.error(500, {"error": {"message": "boom", "type": "server_error"}}))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o", messages=USER)
    line = proxy.requests()[0]
    for field in ("thread", "tenant", "model", "path", "stream", "status", "upstream_ms",
                  "bytes_in", "bytes_out"):
        assert field in line, field
    assert line["thread"] == "t-42" and line["status"] == 200
    assert line["tenant"] != "anonymous" and API_KEY not in line["tenant"]
    assert proxy.requests()[1]["status"] == 500
    assert API_KEY not in proxy.logs.text


@pytest.mark.parametrize("path, body", [
    ("/chat/completions", {"model": "gpt-4o", "messages": USER, "stream": True}),
    ("/responses", {"model": "gpt-4o", "input": "Say hello.", "stream": True}),
])
def test_a_stream_ends_only_after_its_anchor_and_request_line(proxy, fake, monkeypatch,
                                                               path, body) -> None:
    # A client that reads a stream to its end and sends the next turn must find the answer's
    # anchor recorded. A slow recording makes a wrong order show on every turn.
    pipeline = proxy.app[SERVICES].pipeline
    record = pipeline.finish_stream

    def slow_record(*args, **kwargs):
        time.sleep(0.2)
        return record(*args, **kwargs)

    monkeypatch.setattr(pipeline, "finish_stream", slow_record)
    for turn in range(1, 4):
        fake.script(Reply.text(f"Answer {turn}."))
        with httpx.stream("POST", f"{proxy.base_url}{path}", json=body, timeout=20) as answer:
            answer.read()
        assert len(proxy.requests()) == turn


def test_a_body_answer_reaches_the_client_before_its_usage_is_recorded(make_proxy, fake,
                                                                     monkeypatch) -> None:
    # The recording is held, blocking the proxy's loop, until the client has its answer: an
    # answer sent only after the recording would never arrive while it is held.
    proxy = make_proxy(fake, tokens=COUNTED)
    pipeline = proxy.app[SERVICES].pipeline
    record, released, held = pipeline.finish_body, threading.Event(), []

    def held_record(*args, **kwargs):
        held.append(released.wait(10))
        return record(*args, **kwargs)

    monkeypatch.setattr(pipeline, "finish_body", held_record)
    fake.script(Reply.text("First answer."), Reply.text("Second answer."))
    messages = [{"role": "user", "content": "Explain the parser."}]
    first = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                       json={"model": "gpt-4o", "messages": messages},
                       headers={"x-thread-id": "order", "Authorization": f"Bearer {API_KEY}"})
    released.set()
    assert first.status_code == 200 and len(proxy.requests()) == 1 and held == [True]
    # Nothing waits between sending the answer and recording its anchor: the next turn,
    # sent at once, finds it.
    messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "And then?"}]
    second = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                        json={"model": "gpt-4o", "messages": messages},
                        headers={"x-thread-id": "order", "Authorization": f"Bearer {API_KEY}"})
    assert second.status_code == 200
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True]


@pytest.mark.parametrize("stream", [False, True])
def test_a_failed_recording_costs_the_anchor_not_the_answer(proxy, fake, monkeypatch,
                                                            stream) -> None:
    pipeline = proxy.app[SERVICES].pipeline

    def broken(*args, **kwargs):
        raise RuntimeError("store went away")

    monkeypatch.setattr(pipeline, "finish_stream" if stream else "finish_body", broken)
    fake.script(Reply.text("Still here."))
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": "gpt-4o", "messages": USER, "stream": stream}) as answer:
        text = answer.read().decode()
    assert answer.status_code == 200
    if stream:
        assert text.rstrip().endswith("data: [DONE]")
    else:
        assert orjson.loads(text)["choices"][0]["message"]["content"] == "Still here."
    line = proxy.requests()[-1]
    assert line["status"] == 200 and line["usage_not_recorded"] == "RuntimeError"
    assert proxy.logs.events("usage_not_recorded")[-1]["error"] == "RuntimeError"


def test_log_lines_carry_an_iso_utc_timestamp(client: openai.OpenAI, proxy) -> None:
    from datetime import datetime, timezone
    before = datetime.now(timezone.utc)
    client.chat.completions.create(model="gpt-4o", messages=USER)
    stamp = proxy.requests()[-1]["timestamp"]
    assert len(stamp) == len("2026-11-30T16:09:23.822112Z") and stamp.endswith("Z")
    logged = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert before.replace(microsecond=0) <= logged <= datetime.now(timezone.utc)
