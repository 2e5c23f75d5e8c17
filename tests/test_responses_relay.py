"""Responses requests whose state or answer the proxy does not hold, relayed as they are:
`previous_response_id` / `conversation` (the server holds the history), `background` (the answer
comes later through `GET /v1/responses/{id}`), streams ending in `response.failed` or
`response.incomplete`, `input` as a plain string, and instructions changing between turns.
None of them may leave thread state the next turn would misread (an anchor whose usage covers
items the proxy never saw)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from proxy.testing.replies import Reply, call
from tests.conftest import API_KEY
from tests.harness import loaded_state
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

MODEL = "gpt-5-mini"


def _post(proxy, body: dict[str, Any]) -> tuple[bytes, httpx.Response]:
    raw = json.dumps(body, separators=(", ", ": ")).encode()  # not the proxy's own formatting
    with httpx.stream("POST", f"{proxy.base_url}/responses", content=raw, timeout=20,
                      headers={"content-type": "application/json",
                               "authorization": f"Bearer {API_KEY}"}) as answer:
        answer.read()
    return raw, answer


@pytest.mark.parametrize("state", ["previous_response_id", "conversation"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_stateful_turn_goes_up_as_sent_and_anchors_nothing(make_fake, make_proxy, make_client,
                                                             loop_thread, state: str,
                                                             stream: bool) -> None:
    fake = make_fake(always_reason=True)
    proxy = make_proxy(fake)
    client = make_client(proxy.base_url)
    thread = f"stateful-{state}-{stream}"
    fake.script(Reply.text("Noted: 7."))
    first = client.responses.create(model=MODEL, input=[{"role": "user", "content": "Keep 7."}],
                                    prompt_cache_key=thread)
    assert len(loaded_state(loop_thread, proxy, thread).anchors) == 1
    link = ({"previous_response_id": first.id} if state == "previous_response_id"
            else {"conversation": client.conversations.create().id})
    fake.script(Reply.text("7."))
    question = [{"role": "user", "content": "Which number?"}]
    raw, answer = _post(proxy, {"model": MODEL, "input": question, "stream": stream,
                                "prompt_cache_key": thread, **link})
    assert answer.status_code == 200
    assert fake.last("/responses").body == raw
    line = proxy.requests()[-1]
    assert line[state] is True and "passed through" in line["note"]
    assert line["usage_input"] > 0, "the line still says what the turn cost"
    # Its usage counts context held upstream: no anchor may pair it with the visible items.
    assert len(loaded_state(loop_thread, proxy, thread).anchors) == 1


def test_a_stateful_turn_the_upstream_refuses_is_not_sent_twice(make_fake, make_proxy,
                                                                make_client) -> None:
    """The proxy cannot shorten what the server holds: an overflow of a chained request is the
    client's to handle (`truncation: "auto"`, `/responses/compact`), not a reason to resend it."""
    fake = make_fake(limits={"small-*": 300})
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 300}})
    client = make_client(proxy.base_url)
    fake.script(Reply.text("ok"))
    first = client.responses.create(model="small-x", input=[{"role": "user", "content": "w " * 200}],
                                    prompt_cache_key="chained-overflow")
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError, match="exceeds the context window"):
        client.responses.create(model="small-x", previous_response_id=first.id,
                                input=[{"role": "user", "content": "more " * 100}],
                                prompt_cache_key="chained-overflow")
    assert len(fake.requests) == before + 1
    assert "retried" not in proxy.requests()[-1]


def test_a_plain_string_input_goes_up_as_sent(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    fake.script(Reply.text("Hello."))
    raw, answer = _post(proxy, {"model": MODEL, "input": "Say hello.", "instructions": "Be brief."})
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
    assert fake.last("/responses").body == raw


def _instructed(client, fake, history: list[dict[str, Any]], instructions: str) -> Any:
    fake.script(Reply.text("ok"))
    response = client.responses.create(model=MODEL, input=history, instructions=instructions,
                                       prompt_cache_key="instructions-thread", store=False)
    history += [i.model_dump(exclude_none=True) for i in response.output]
    history.append({"role": "user", "content": "Next."})
    return response


def test_changed_instructions_reach_upstream_and_void_the_anchor(make_fake, make_proxy,
                                                                 make_client) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    client = make_client(proxy.base_url)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Start."}]
    _instructed(client, fake, history, "You are terse.")
    _instructed(client, fake, history, "You are verbose.")
    assert fake.last("/responses").json["instructions"] == "You are verbose."
    assert not proxy.requests()[-1].get("anchor_used"), "usage counted other instructions"
    _instructed(client, fake, history, "You are verbose.")
    assert proxy.requests()[-1].get("anchor_used")


def test_a_rebuilt_body_keeps_every_other_field(make_fake, make_proxy, make_client) -> None:
    """A body the proxy rebuilds (here: repair answers an interrupted call) keeps `truncation`,
    `store`, `include`, `background`, `instructions` and unknown fields as the client sent them."""
    fake = make_fake()
    proxy = make_proxy(fake)
    client = make_client(proxy.base_url)
    history: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
    fake.script(Reply.tool_calls(call("list_dir", {"path": "."})))
    first = client.responses.create(model=MODEL, input=history, store=False)
    history += [i.model_dump(exclude_none=True) for i in first.output]
    history.append({"role": "user", "content": "Stop that; just say hi."})
    fields = {"truncation": "auto", "store": False, "include": ["reasoning.encrypted_content"],
              "background": False, "instructions": "Be kind.", "max_output_tokens": 300,
              "x_vendor_flag": {"n": 1}}
    fake.script(Reply.text("hi"))
    _, answer = _post(proxy, {"model": MODEL, "input": history, **fields})
    assert answer.status_code == 200
    sent = fake.last("/responses").json
    assert proxy.requests()[-1]["compaction"] == "applied"
    assert {k: sent.get(k) for k in fields} == fields
    assert sent["input"][:2] == history[:2]


def _queued(response_id: str, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": 1, "status": status,
            "background": True, "error": None, "incomplete_details": None, "model": MODEL,
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": usage}


def test_a_background_answer_is_relayed_then_fetched(make_upstream, make_proxy, make_client,  # noqa: F811
                                                     loop_thread) -> None:
    message = {"type": "message", "id": "msg_bg", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done later.", "annotations": []}]}
    usage = {"input_tokens": 9000, "output_tokens": 3, "total_tokens": 9003,
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens_details": {"reasoning_tokens": 0}}

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return web.json_response(_queued("resp_bg", "queued", [], None))
        return web.json_response(_queued("resp_bg", "completed", [message], usage))

    upstream = make_upstream(answer)
    proxy = make_proxy(upstream.url)
    client = make_client(proxy.base_url)
    queued = client.responses.create(model=MODEL, input=[{"role": "user", "content": "Go."}],
                                     background=True, prompt_cache_key="bg-thread")
    assert queued.status == "queued" and queued.output == []
    assert json.loads(upstream.seen[-1][3])["background"] is True
    done = client.responses.retrieve(queued.id)
    assert done.status == "completed" and done.output_text == "Done later."
    assert upstream.seen[-1][:2] == ("GET", "/tenant-a/v1/responses/resp_bg")
    assert loaded_state(loop_thread, proxy, "bg-thread").anchors == ()


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_a_failed_stream_is_relayed_whole_and_anchors_nothing(make_upstream, make_proxy,  # noqa: F811
                                                             make_client, loop_thread) -> None:
    failed = {**_queued("resp_f", "failed", [], {"input_tokens": 50, "output_tokens": 0,
                                                  "total_tokens": 50}),
              "error": {"code": "server_error", "message": "The model had an error."}}
    started = {**failed, "status": "in_progress", "error": None, "usage": None}

    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(_sse("response.created", {"sequence_number": 0, "response": started})
                        + _sse("response.in_progress", {"sequence_number": 1, "response": started})
                        + _sse("response.failed", {"sequence_number": 2, "response": failed}))
        return out

    proxy = make_proxy(make_upstream(answer).url)
    client = make_client(proxy.base_url)
    events = list(client.responses.create(model=MODEL, input=[{"role": "user", "content": "Hi"}],
                                          stream=True, prompt_cache_key="failed-thread"))
    assert [e.type for e in events] == ["response.created", "response.in_progress",
                                        "response.failed"]
    assert events[-1].response.error.code == "server_error"
    assert proxy.requests()[-1]["status"] == 200
    assert loaded_state(loop_thread, proxy, "failed-thread").anchors == ()


def test_an_incomplete_stream_is_relayed_and_anchors_its_turn(make_fake, make_proxy, make_client,
                                                              loop_thread) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    client = make_client(proxy.base_url)
    fake.script(Reply.length("Cut sh"))
    events = list(client.responses.create(model=MODEL, input=[{"role": "user", "content": "Write."}],
                                          max_output_tokens=16, prompt_cache_key="cut-thread",
                                          stream=True))
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.output_text == "Cut sh"
    assert len(loaded_state(loop_thread, proxy, "cut-thread").anchors) == 1
