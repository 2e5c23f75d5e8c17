"""What the proxy does not change reaches the client as upstream sent it (SPEC §11, §6), on the
real server with an upstream that answers whatever a draw scripts, in the chunks it is given.

- An upstream error (any 4xx/5xx the proxy does not act on: no context overflow, no rejected
  reasoning state) reaches the client with its status and its body, byte for byte.
- A whole 200 answer reaches the client byte for byte.
- A stream whose bytes the proxy has no reason to change (the client asked for the usage
  chunk, or upstream sent none to hide) reaches the client byte for byte, however the upstream
  split it into writes and whatever line endings it used.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy import jsonio
from tests.edge_inputs import PATHS, Answer

_FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
_APIS = st.sampled_from(sorted(PATHS))
# Words that cannot spell an overflow or a reasoning-state rejection (PROTOCOL.md §3, §4).
_words = st.lists(st.sampled_from(("rate", "limit", "quota", "bad", "request", "server", "busy", "模型",
                                   "错误", "🙂", "\"x\"", "\\", "\n", "")), max_size=6).map(" ".join)


def _split(data: bytes, sizes: list[int]) -> tuple[bytes, ...]:
    pieces, at = [], 0
    for size in sizes:
        if at >= len(data):
            break
        pieces.append(data[at:at + size])
        at += size
    return (*pieces, data[at:]) if at < len(data) else tuple(pieces)


@st.composite
def error_answers(draw: st.DrawFn) -> Answer:
    status = draw(st.sampled_from((400, 401, 403, 404, 409, 422, 429, 500, 502, 503)))
    if draw(st.booleans()):
        error = {"message": draw(_words), "type": draw(st.sampled_from(("invalid_request_error", "server_error"))),
                 "code": draw(st.none() | st.sampled_from(("rate_limit_exceeded", "invalid_api_key", "x")))}
        body = json.dumps({"error": error}, ensure_ascii=draw(st.booleans()),
                          indent=draw(st.none() | st.just(2))).encode()
        kind = "application/json"
    else:
        body = draw(_words).encode() + draw(st.binary(max_size=30).filter(lambda b: b"{" not in b))
        kind = draw(st.sampled_from(("text/plain", "text/html", "")))
    sizes = draw(st.lists(st.integers(1, 40), max_size=6))
    return Answer(status, kind, _split(body, sizes))


def _post(proxy: Any, api: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.stream("POST", f"{proxy.base_url}/{PATHS[api][0]}", content=jsonio.dumps(body), timeout=60,
                      headers={"content-type": "application/json", "authorization": "Bearer sk-relay",
                               "x-thread-id": "relay-bytes"}) as got:
        got.read()
    return got


@settings(suppress_health_check=_FIXTURES, max_examples=25)
@given(api=_APIS, answer=error_answers(), stream=st.booleans())
def test_an_upstream_error_reaches_the_client_as_sent(scripted, api: str, answer: Answer, stream: bool) -> None:
    proxy, upstream = scripted
    upstream.answer = answer
    got = _post(proxy, api, {"model": "gpt-4o", "stream": stream, PATHS[api][1]: [_user(api)]})
    assert got.status_code == answer.status
    assert got.content == b"".join(answer.chunks)


def _user(api: str) -> dict[str, Any]:
    return {"role": "user", "content": "Say hi."} if api == "chat" else \
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}


def _chat_events(draw: st.DrawFn, with_usage: bool) -> list[dict[str, Any]]:
    texts = draw(st.lists(_words, min_size=1, max_size=4))
    events: list[dict[str, Any]] = [
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o",
         "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}]} for t in texts]
    events.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if with_usage:
        events.append({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": [],
                       "usage": {"prompt_tokens": 9, "completion_tokens": len(texts), "total_tokens": 9 + len(texts)}})
    return events


def _responses_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    text = draw(_words)
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}
    response = {"id": "resp_1", "object": "response", "model": "gpt-4o", "status": "completed",
                "output": [message], "usage": {"input_tokens": 9, "output_tokens": 2, "total_tokens": 11}}
    return [{"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
             "content_index": 0, "delta": text},
            {"type": "response.output_item.done", "output_index": 0, "item": message},
            {"type": "response.completed", "response": response}]


@st.composite
def streams(draw: st.DrawFn, api: str, asked_usage: bool | None) -> Answer:
    events = _chat_events(draw, with_usage=asked_usage is True) if api == "chat" else _responses_events(draw)
    end = draw(st.sampled_from((b"\n\n", b"\r\n\r\n")))
    lines = [b"data: " + json.dumps(e, ensure_ascii=draw(st.booleans())).encode() + end for e in events]
    if draw(st.booleans()):
        lines.insert(0, b": keep-alive" + end)
    if api == "chat":
        lines.append(b"data: [DONE]" + end)
    sizes = draw(st.lists(st.integers(1, 64), max_size=12))
    return Answer(200, "text/event-stream", _split(b"".join(lines), sizes))


@settings(suppress_health_check=_FIXTURES, max_examples=25)
@given(api=_APIS, data=st.data())
def test_a_stream_the_proxy_has_no_reason_to_change_reaches_the_client_as_sent(
        scripted, api: str, data: st.DataObject) -> None:
    proxy, upstream = scripted
    asked = data.draw(st.sampled_from((None, False, True)), "include_usage") if api == "chat" else None
    upstream.answer = data.draw(streams(api, asked), "answer")
    body: dict[str, Any] = {"model": "gpt-4o", "stream": True, PATHS[api][1]: [_user(api)]}
    if asked is not None:
        body["stream_options"] = {"include_usage": asked}
    got = _post(proxy, api, body)
    assert got.status_code == 200
    assert got.content == b"".join(upstream.answer.chunks)


@settings(suppress_health_check=_FIXTURES, max_examples=15)
@given(api=_APIS, text=_words, ascii_only=st.booleans(), sizes=st.lists(st.integers(1, 50), max_size=5))
def test_a_whole_answer_reaches_the_client_as_sent(scripted, api: str, text: str, ascii_only: bool,
                                                    sizes: list[int]) -> None:
    proxy, upstream = scripted
    if api == "chat":
        doc: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": text}}],
                               "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}
    else:
        doc = {"id": "resp_1", "object": "response", "model": "gpt-4o", "status": "completed",
               "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]}],
               "usage": {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}}
    upstream.answer = Answer(200, "application/json",
                             _split(json.dumps(doc, ensure_ascii=ascii_only).encode(), sizes))
    got = _post(proxy, api, {"model": "gpt-4o", PATHS[api][1]: [_user(api)]})
    assert got.status_code == 200
    assert got.content == b"".join(upstream.answer.chunks)
