"""An agent driving the Responses API through the proxy with the official client: a chain of
tool calls by `previous_response_id` after the proxy compacted the thread, the SDK's retry of a
stream the proxy could not start, and a client that leaves a stream half read."""

from __future__ import annotations

import json
import time
from typing import Any

import openai
from aiohttp import web

from proxy.testing.replies import Reply, call
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.conftest import API_KEY
from tests.test_responses_api import LIMIT, MODEL, MODELS, TOOLS, _reply, _steps
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture


def _compacted_thread(client: openai.OpenAI, fake, summarizer, thread: str) -> Any:
    """Stateless turns (the whole history each time, stored upstream by default) until the
    proxy has summarized the thread once; the last response."""
    history: list[dict[str, Any]] = []
    for side, chunk in _steps(coding_session(110, seed=6, api="responses")):
        if side == "client":
            history.extend(chunk)
            continue
        fake.script(_reply(chunk))
        response = client.responses.create(model=MODEL, input=history, tools=TOOLS,
                                           prompt_cache_key=thread)
        history.extend(item.model_dump(exclude_none=True) for item in response.output)
        if summarizer.calls:
            return response
    raise AssertionError("the session never reached the compaction trigger")


def test_a_chain_of_tool_calls_by_previous_response_id_continues_a_compacted_thread(
        make_fake, make_proxy, make_client) -> None:
    fake = make_fake(limits={"small-*": LIMIT}, always_reason=True)
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    client = make_client(proxy.base_url)
    previous = _compacted_thread(client, fake, summarizer, "chained")
    assert proxy.requests()[-1].get("compacted") is True
    for n in range(3):
        fake.script(Reply.tool_calls(call("grep", {"pattern": f"step-{n}"})))
        last = previous.output[-1]
        answer = ([{"type": "function_call_output", "call_id": last.call_id, "output": "found"}]
                  if last.type == "function_call" else [{"role": "user", "content": "Go on."}])
        with client.responses.stream(model=MODEL, previous_response_id=previous.id,
                                     input=answer, tools=TOOLS) as stream:
            kinds = [event.type for event in stream]
            response = stream.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert response.status == "completed" and response.output[-1].type == "function_call"
        assert json.loads(response.output[-1].arguments) == {"pattern": f"step-{n}"}
        sent = [r for r in fake.requests if not is_summarizer_request(r.json)][-1].json
        assert (sent["previous_response_id"], sent["input"]) == (previous.id, answer)
        line = proxy.requests()[-1]
        assert line["previous_response_id"] is True and "compaction" not in line
        assert line["status"] == 200 and "upstream_error" not in line
        previous = response
    listed = client.responses.input_items.list(previous.id)
    assert listed.data[0].type == "function_call_output"


def _completed_stream() -> bytes:
    response = {"id": "resp_r", "object": "response", "created_at": 1, "model": "gpt-5",
                "status": "completed", "output": [], "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": [], "usage": None}
    return b"".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, 'response': response})}\n\n".encode()
        for n, kind in enumerate(("response.created", "response.completed")))


def test_the_sdk_retries_a_stream_the_proxy_could_not_start(make_upstream,  # noqa: F811
                                                            make_proxy) -> None:
    calls = iter(["broken", "streamed"])

    async def answer(request: web.Request) -> web.StreamResponse:
        if next(calls) == "broken":
            assert request.transport is not None
            request.transport.close()  # no answer at all: the proxy's own 502
            return web.Response()
        return web.Response(body=_completed_stream(), content_type="text/event-stream")

    upstream = make_upstream(answer)
    proxy = make_proxy(upstream.url)
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=1,
                       timeout=20) as client:
        events = list(client.responses.create(
            model="gpt-5", input=[{"role": "user", "content": "Hi"}], stream=True,
            extra_headers={"Idempotency-Key": "idem-7"}))
    assert [event.type for event in events] == ["response.created", "response.completed"]
    assert [line["status"] for line in proxy.requests()] == [502, 200]
    seen = [headers for _, _, headers, _ in upstream.seen]
    assert [h["x-stainless-retry-count"] for h in seen] == ["0", "1"]
    assert [h["idempotency-key"] for h in seen] == ["idem-7", "idem-7"]
    assert all(h["x-stainless-lang"] == "python" for h in seen)


def test_a_client_that_leaves_a_stream_frees_the_upstream_and_its_thread(fake, proxy,
                                                                         client) -> None:
    fake.script(Reply.hang(after=4))
    ask = dict(model="gpt-5", input=[{"role": "user", "content": "Hi"}],
               prompt_cache_key="left")
    stream = client.responses.create(stream=True, **ask)
    assert next(iter(stream)).type == "response.created"
    stream.close()
    deadline = time.monotonic() + 5
    while not fake.peer_gone and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.peer_gone == ["/v1/responses"]
    while proxy.requests()[-1:] == [] and time.monotonic() < deadline:
        time.sleep(0.02)
    line = proxy.requests()[-1]
    assert line["status"] == 499 and line["error"] == "client_disconnected"
    # How far the client read: the events before it left, sent as the first byte went out.
    assert line["bytes_out"] > 0 and line["ttfb_ms"] >= 0
    fake.script(Reply.text("Back."))
    assert client.responses.create(**ask).output_text == "Back."
