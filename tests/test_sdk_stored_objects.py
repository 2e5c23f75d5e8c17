"""The official client's calls on stored objects and helper endpoints, through the proxy: stored
chat completions, stored responses, `input_tokens.count` and `responses.compact` are no turns
to compact; each reaches upstream with its method, path and query, and its answer parses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from aiohttp import web

from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

COMPLETION = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                           "logprobs": None, "finish_reason": "stop"}]}
RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5",
            "status": "completed", "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": []}
EMPTY_LIST = {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


def _answer(method: str, path: str) -> dict[str, Any]:
    if path.endswith("/input_tokens"):
        return {"object": "response.input_tokens", "input_tokens": 7}
    if path.endswith("/compact"):
        return {"id": "resp_c", "object": "response.compaction", "created_at": 1,
                "output": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA"}],
                "usage": {"input_tokens": 7, "output_tokens": 1, "total_tokens": 8,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
    if method == "DELETE":
        kind = "chat.completion.deleted" if "/chat/" in path else "response.deleted"
        return {"id": path.rsplit("/", 1)[-1], "object": kind, "deleted": True}
    if path.endswith(("/messages", "/input_items", "/chat/completions")):
        return EMPTY_LIST
    return COMPLETION if "/chat/" in path else RESPONSE


async def _stored(request: web.Request) -> web.StreamResponse:
    return web.json_response(_answer(request.method, request.path))


CALLS: list[tuple[str, str, Callable[[openai.OpenAI], Any]]] = [
    ("GET", "/chat/completions?limit=2&model=gpt-4o",
     lambda c: c.chat.completions.list(limit=2, model="gpt-4o")),
    ("GET", "/chat/completions/chatcmpl-1", lambda c: c.chat.completions.retrieve("chatcmpl-1")),
    ("POST", "/chat/completions/chatcmpl-1",
     lambda c: c.chat.completions.update("chatcmpl-1", metadata={"k": "v"})),
    ("GET", "/chat/completions/chatcmpl-1/messages",
     lambda c: c.chat.completions.messages.list("chatcmpl-1")),
    ("DELETE", "/chat/completions/chatcmpl-1", lambda c: c.chat.completions.delete("chatcmpl-1")),
    ("GET", "/responses/resp_1", lambda c: c.responses.retrieve("resp_1")),
    ("GET", "/responses/resp_1/input_items", lambda c: c.responses.input_items.list("resp_1")),
    ("POST", "/responses/resp_1/cancel", lambda c: c.responses.cancel("resp_1")),
    ("DELETE", "/responses/resp_1", lambda c: c.responses.delete("resp_1")),
    ("POST", "/responses/input_tokens",
     lambda c: c.responses.input_tokens.count(model="gpt-5", input="Count me.")),
    ("POST", "/responses/compact",
     lambda c: c.responses.compact(model="gpt-5", input=[{"role": "user", "content": "hi"}])),
]


@pytest.mark.parametrize("method, path, call", CALLS, ids=[f"{m} {p}" for m, p, _ in CALLS])
def test_stored_objects_and_helpers_go_up_as_sent(make_upstream, make_proxy, make_client,
                                                 method: str, path: str,
                                                 call: Callable[[openai.OpenAI], Any]) -> None:
    upstream = make_upstream(_stored)
    proxy = make_proxy(upstream.url)
    call(make_client(proxy.base_url))
    (seen_method, seen_path, _, _), = upstream.seen
    assert (seen_method, seen_path) == (method, "/tenant-a/v1" + path)
    line = proxy.requests()[-1]
    assert line["status"] == 200 and line.get("passthrough") is True


def test_a_background_stream_resumed_by_id_is_relayed_as_events(make_upstream, make_proxy,
                                                                 make_client) -> None:
    events = [{"type": "response.output_text.delta", "sequence_number": 4, "item_id": "msg_1",
               "output_index": 0, "content_index": 0, "delta": "lo", "logprobs": []},
              {"type": "response.completed", "sequence_number": 5,
               "response": {**RESPONSE, "usage": None}}]

    async def resumed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        return response

    upstream = make_upstream(resumed)
    proxy = make_proxy(upstream.url)
    stream = make_client(proxy.base_url).responses.retrieve("resp_1", stream=True,
                                                            starting_after=3)
    assert [event.sequence_number for event in stream] == [4, 5]
    (method, path, _, _), = upstream.seen
    assert (method, path) == ("GET", "/tenant-a/v1/responses/resp_1?starting_after=3&stream=true")


def test_models_and_embeddings_go_both_ways_untouched(fake, client: openai.OpenAI,
                                                      make_client) -> None:
    direct = make_client(fake.url)
    calls: list[Callable[[openai.OpenAI], Any]] = [
        lambda c: c.models.with_raw_response.list(),
        lambda c: c.models.with_raw_response.retrieve("fake-model"),
        lambda c: c.embeddings.with_raw_response.create(model="text-embedding-3-small",
                                                        input=["a", "b"], dimensions=8),
    ]
    for call in calls:
        straight = call(direct)
        sent = fake.requests[-1]
        relayed = call(client)
        assert relayed.http_response.content == straight.http_response.content
        assert (fake.requests[-1].method, fake.requests[-1].path, fake.requests[-1].body) == \
            (sent.method, sent.path, sent.body)
    assert relayed.parse().data[0].embedding == straight.parse().data[0].embedding


def test_a_file_upload_goes_up_byte_for_byte(make_upstream, make_proxy, make_client) -> None:
    async def created(request: web.Request) -> web.StreamResponse:
        return web.json_response({"id": "file-1", "object": "file", "bytes": 3, "created_at": 1,
                                  "filename": "batch.jsonl", "purpose": "batch",
                                  "status": "processed"})

    upstream = make_upstream(created)
    proxy = make_proxy(upstream.url)
    content = b'{"custom_id": "a"}\n' * 5000
    done = make_client(proxy.base_url).files.create(file=("batch.jsonl", content),
                                                    purpose="batch")
    assert done.id == "file-1"
    (method, path, headers, body), = upstream.seen
    assert (method, path) == ("POST", "/tenant-a/v1/files")
    assert headers["content-type"].startswith("multipart/form-data; boundary=")
    assert content in body and int(headers["content-length"]) == len(body)
