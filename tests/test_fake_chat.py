"""The fake upstream's chat endpoint over HTTP: exact shapes, streams, failures, guards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.testing.fake_upstream import DEFAULT_TEXT, FakeUpstream
from proxy.testing.messages import assistant_calls, tool_result, user
from proxy.testing.replies import Reply, call


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(limits={"small-*": 300}) as upstream:
        yield upstream


async def post(fake: FakeUpstream, payload: Any, path: str = "/chat/completions",
               headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + path, data=data, headers=headers) as response:
            return response.status, await response.read()


def sse_data(raw: bytes) -> list[Any]:
    frames = [f for f in raw.decode().split("\n\n") if f.strip()]
    assert all(f.startswith("data: ") for f in frames)
    return [f[6:] if f[6:] == "[DONE]" else orjson.loads(f[6:]) for f in frames]


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages), **extra}


async def test_non_streamed_completion_has_openai_shape(fake: FakeUpstream) -> None:
    status, raw = await post(fake, chat(user("hi")))
    body = orjson.loads(raw)
    assert status == 200
    assert set(body) == {"id", "object", "created", "model", "choices", "usage", "service_tier",
                         "system_fingerprint"}
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"] == [{"index": 0, "logprobs": None, "finish_reason": "stop", "message": {
        "role": "assistant", "content": DEFAULT_TEXT, "refusal": None, "annotations": []}}]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


async def test_stream_without_include_usage_has_no_usage_at_all(fake: FakeUpstream) -> None:
    status, raw = await post(fake, chat(user("hi"), stream=True))
    frames = sse_data(raw)
    assert status == 200 and frames[-1] == "[DONE]"
    chunks = frames[:-1]
    assert all("usage" not in c and c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(isinstance(c["obfuscation"], str) for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == DEFAULT_TEXT
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert len({c["id"] for c in chunks}) == 1


async def test_stream_with_include_usage_ends_with_a_usage_chunk(fake: FakeUpstream) -> None:
    payload = chat(user("hi"), stream=True, stream_options={"include_usage": True,
                                                           "include_obfuscation": False})
    chunks = sse_data((await post(fake, payload))[1])[:-1]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert all("obfuscation" not in c for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0


async def test_tool_call_fragments_split_mid_json_and_interleave(fake: FakeUpstream) -> None:
    arguments = [{"path": "src/app/main.py", "start": 1}, {"pattern": "def handle", "glob": "*.py"}]
    fake.script(Reply.tool_calls(call("read_file", arguments[0]), call("grep", arguments[1])))
    chunks = sse_data((await post(fake, chat(user("hi"), stream=True)))[1])[:-1]
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls") or ()]
    order = [d["index"] for d in deltas]
    assert order != sorted(order)  # interleaved across indexes
    headers = [d for d in deltas if "id" in d]
    assert [h["function"]["arguments"] for h in headers] == ["", ""]
    assert all(h["id"].startswith("call_") and h["type"] == "function" for h in headers)
    fragments = [d["function"]["arguments"] for d in deltas if "id" not in d]
    assert any(not _parses(f) for f in fragments)
    for index, expected in enumerate(arguments):
        joined = "".join(d["function"]["arguments"] for d in deltas if d["index"] == index)
        assert orjson.loads(joined) == expected
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def _parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


async def test_rules_are_enforced_and_consume_no_scripted_reply(fake: FakeUpstream) -> None:
    fake.script(Reply.text("scripted"))
    status, raw = await post(fake, chat(user("hi"), tool_result("c1")))
    assert status == 400 and b"preceeding" in raw
    assert fake.scripted == 1
    status, raw = await post(fake, chat(user("hi"), assistant_calls("c1"), tool_result("c1")))
    assert orjson.loads(raw)["choices"][0]["message"]["content"] == "scripted"


async def test_prompt_over_the_model_limit_is_context_length_exceeded(fake: FakeUpstream) -> None:
    fake.script(Reply.text("after compaction"))
    status, raw = await post(fake, {"model": "small-1", "messages": [user("word " * 400)]})
    error = orjson.loads(raw)["error"]
    assert status == 400 and error["code"] == "context_length_exceeded"
    assert error["message"].startswith("This model's maximum context length is 300 tokens. However, "
                                       "your messages resulted in ")
    assert fake.scripted == 1
    status, _ = await post(fake, {"model": "gpt-4o", "messages": [user("word " * 400)]})
    assert status == 200


async def test_scripted_errors_and_forced_overflow(fake: FakeUpstream) -> None:
    fake.script(Reply.error(429, {"error": {"message": "slow down", "type": "rate_limit"}}),
                Reply.overflow())
    expected = b'{"error":{"message":"slow down","type":"rate_limit"}}'
    assert await post(fake, chat(user("hi"))) == (429, expected)
    status, raw = await post(fake, chat(user("hi")))
    assert status == 400 and orjson.loads(raw)["error"]["code"] == "context_length_exceeded"


async def test_finish_reason_length(fake: FakeUpstream) -> None:
    fake.script(Reply.length("cut sh"))
    body = orjson.loads((await post(fake, chat(user("hi"))))[1])
    assert body["choices"][0]["finish_reason"] == "length"


async def test_stream_that_dies_aborts_the_connection(fake: FakeUpstream) -> None:
    fake.script(Reply.die(after=3))
    received = b""
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/chat/completions",
                                json=chat(user("hi"), stream=True)) as response:
            with pytest.raises(aiohttp.ClientPayloadError):
                async for line in response.content:
                    received += line
    assert received.count(b"data: ") == 3 and b"[DONE]" not in received


async def test_non_streamed_die_resets_the_connection(fake: FakeUpstream) -> None:
    fake.script(Reply.die())
    with pytest.raises(aiohttp.ClientError):
        await post(fake, chat(user("hi")))


async def test_mid_stream_error_frame(fake: FakeUpstream) -> None:
    fake.script(Reply.stream_error(after=2))
    frames = sse_data((await post(fake, chat(user("hi"), stream=True)))[1])
    assert len(frames) == 3 and frames[-1]["error"]["type"] == "server_error"


async def test_hang_never_answers(fake: FakeUpstream) -> None:
    fake.script(Reply.hang())
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        with pytest.raises(TimeoutError):
            async with session.post(fake.url + "/chat/completions", json=chat(user("hi"))) as response:
                await response.read()


async def test_responder_comes_before_the_script(fake: FakeUpstream) -> None:
    fake.script(Reply.text("scripted"))
    fake.responder = lambda r: Reply.text("summary") if "summarize" in r.body.decode() else None
    first = orjson.loads((await post(fake, chat(user("please summarize"))))[1])
    second = orjson.loads((await post(fake, chat(user("go on"))))[1])
    assert first["choices"][0]["message"]["content"] == "summary"
    assert second["choices"][0]["message"]["content"] == "scripted"


async def test_requests_are_recorded(fake: FakeUpstream) -> None:
    await post(fake, chat(user("hi")), path="/chat/completions?x=1", headers={"X-Thread-Id": "t1"})
    recorded = fake.last("/chat/completions")
    assert recorded.method == "POST" and recorded.path == "/v1/chat/completions"
    assert recorded.query == {"x": "1"} and recorded.headers["x-thread-id"] == "t1"
    assert recorded.json == chat(user("hi")) and orjson.loads(recorded.body) == recorded.json


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
async def test_json_that_only_the_rfc_allows_is_accepted(fake: FakeUpstream, path: str) -> None:
    # A lone surrogate escape: valid JSON that orjson refuses and real upstreams take.
    text = '"see \\ud800 here"'
    if path == "/responses":
        raw = b'{"model": "gpt-4o", "instructions": ' + text.encode() + b', "input": ' + text.encode() + b"}"
    else:
        raw = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": ' + text.encode() + b"}]}"
    status, answer = await post(fake, raw, path=path)
    assert status == 200, answer
    assert fake.last(path).json is not None


async def test_bad_json_and_missing_model(fake: FakeUpstream) -> None:
    status, raw = await post(fake, b"{nope")
    assert status == 400 and orjson.loads(raw)["error"]["message"].startswith(
        "We could not parse the JSON body of your request.")
    status, raw = await post(fake, {"messages": [user("hi")]})
    assert orjson.loads(raw)["error"]["message"] == "you must provide a model parameter"


async def test_api_key_is_checked_only_when_configured() -> None:
    async with FakeUpstream(api_key="sk-secret-key-1234") as fake:
        status, raw = await post(fake, chat(user("hi")))
        assert status == 401 and orjson.loads(raw)["error"] == {
            "message": "You didn't provide an API key. You need to provide your API key in an "
                       "Authorization header using Bearer auth (i.e. Authorization: Bearer "
                       "YOUR_KEY), or as the password field (with blank username) if you're "
                       "accessing the API from your browser and are prompted for a username and "
                       "password. You can obtain an API key from "
                       "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": None, "code": None}
        wrong = {"Authorization": "Bearer sk-wrong-key-9999"}
        status, raw = await post(fake, chat(user("hi")), headers=wrong)
        assert status == 401 and orjson.loads(raw)["error"] == {
            "message": "Incorrect API key provided: sk-wrong*****9999. You can find your API key at "
                       "https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
        status, _ = await post(fake, chat(user("hi")), headers={"Authorization": "Bearer sk-secret-key-1234"})
        assert status == 200


async def test_unknown_paths_are_openai_404s(fake: FakeUpstream) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.delete(fake.url + "/files/abc") as response:
            assert response.status == 404
            assert (await response.json())["error"]["message"] == "Invalid URL (DELETE /v1/files/abc)"
        async with session.get(fake.url + "/chat/unknown") as response:
            assert response.status == 404


async def test_models_lists_configured_names_and_the_default() -> None:
    async with FakeUpstream(limits={"small-*": 10, "big-model": 100}, models=("extra",)) as fake:
        async with aiohttp.ClientSession() as session:
            async with session.get(fake.url + "/models") as response:
                names = [m["id"] for m in (await response.json())["data"]]
            async with session.get(fake.url + "/models/small-7") as response:
                assert response.status == 200
            async with session.get(fake.url + "/models/nope") as response:
                assert (await response.json())["error"]["code"] == "model_not_found"
    assert names == ["big-model", "extra", "fake-model"]


async def test_embeddings_are_deterministic_unit_vectors(fake: FakeUpstream) -> None:
    payload = {"model": "text-embedding-3-small", "input": ["a", "b"], "dimensions": 8}
    first = orjson.loads((await post(fake, payload, "/embeddings"))[1])
    second = orjson.loads((await post(fake, payload, "/embeddings"))[1])
    assert first == second and len(first["data"]) == 2
    vector = first["data"][0]["embedding"]
    assert len(vector) == 8 and abs(sum(v * v for v in vector) - 1.0) < 1e-9
    assert first["data"][0]["embedding"] != first["data"][1]["embedding"]
