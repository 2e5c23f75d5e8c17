"""The Responses API through the same pipeline, the way Codex-style clients use it (issue 6)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compaction.apply import SUMMARY_HEADER
from proxy.testing.reference_tokens import responses_prompt_tokens
from proxy.testing.replies import Reply, call
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.harness import start_proxy, stop_proxy

LIMIT = 16_000
MODEL = "small-codex"
MODELS = {"small-*": {"max_input_tokens": LIMIT}}
TOOLS = [{"type": "function", "name": n, "parameters": {"type": "object"}}
         for n in ("read_file", "grep", "glob", "list_dir", "web_search", "edit_file",
                   "write_file", "run_tests", "todo_write")]


def _steps(items: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The session as ("client", items) and ("model", items) steps, in order."""
    steps: list[tuple[str, list[dict[str, Any]]]] = []
    for item in items:
        side = "model" if item.get("type") == "function_call" or item.get("role") == "assistant" \
            else "client"
        if steps and steps[-1][0] == side and side == "model":
            steps[-1][1].append(item)
        else:
            steps.append((side, [item]))
    return steps


def _reply(items: list[dict[str, Any]]) -> Reply:
    calls = [call(i["name"], i["arguments"], id=i["call_id"]) for i in items
             if i.get("type") == "function_call"]
    texts = [p["text"] for i in items if i.get("type") == "message" for p in i["content"]]
    text = "\n".join(texts) if texts else None
    return Reply.tool_calls(*calls, content=text) if calls else Reply.text(text or "")


def _codex(client, fake, items: list[dict[str, Any]], conversation: str, *,
           stream_every: int = 0, limit_turns: int | None = None) -> tuple[list[Any], list[dict]]:
    """Replay a session as Codex does: full item list every turn, store false, encrypted
    reasoning included, the model's output items appended to the history as returned."""
    history: list[dict[str, Any]] = []
    responses = []
    turns = 0
    for side, chunk in _steps(items):
        if side == "client":
            history.extend(chunk)
            continue
        if limit_turns is not None and turns >= limit_turns:
            break
        turns += 1
        fake.script(_reply(chunk))
        kwargs = dict(model=MODEL, input=history, store=False, tools=TOOLS,
                      include=["reasoning.encrypted_content"], prompt_cache_key=conversation)
        if stream_every and turns % stream_every == 0:
            with client.responses.stream(**kwargs) as stream:
                response = stream.get_final_response()
        else:
            response = client.responses.create(**kwargs)
        responses.append(response)
        history.extend(item.model_dump(exclude_none=True) for item in response.output)
    return responses, history


@pytest.fixture
def codex_setup(make_fake, make_proxy, make_client):
    fake = make_fake(limits={"small-*": LIMIT}, always_reason=True)
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    return fake, summarizer, proxy, make_client(proxy.base_url)


def _main(fake) -> list[Any]:
    return [r for r in fake.requests if r.path.endswith("/responses")
            and not is_summarizer_request(r.json)]


def _has_summary(body: dict[str, Any]) -> bool:
    return any(part.get("text", "").startswith(SUMMARY_HEADER)
               for item in body.get("input", []) if item.get("type") == "message"
               for part in item.get("content", []) if isinstance(part, dict))


def test_a_codex_session_stays_under_the_limit(codex_setup) -> None:
    fake, summarizer, proxy, client = codex_setup
    items = coding_session(220, seed=3, api="responses")
    responses, _ = _codex(client, fake, items, "codex-conv-1", stream_every=4)
    assert len(responses) >= 90
    assert all(r.status == "completed" for r in responses)
    main = _main(fake)
    assert all(responses_prompt_tokens(r.json) <= LIMIT for r in main)
    assert proxy.logs.events("compaction_completed"), "the session never compacted"
    assert summarizer.calls >= 1
    assert _has_summary(main[-1].json), "summary present after compaction"
    lines = proxy.requests()
    assert {line["thread_source"] for line in lines} == {"body:prompt_cache_key"}
    assert not any("invalid_encrypted_content" in str(line) for line in lines)
    assert all(line["status"] == 200 for line in lines)
    # Compacted projections carry no encrypted reasoning; uncompacted ones carry the client's.
    for record in main:
        if _has_summary(record.json):
            assert not any(i.get("type") == "reasoning" for i in record.json["input"])


def test_streamed_responses_anchor_and_relay(codex_setup) -> None:
    fake, _, proxy, client = codex_setup
    items = coding_session(40, seed=5, api="responses")
    responses, _ = _codex(client, fake, items, "codex-stream", stream_every=1, limit_turns=6)
    assert len(responses) == 6 and all(r.status == "completed" for r in responses)
    lines = proxy.requests()
    assert all(line["stream"] for line in lines)
    assert any(line.get("anchor_used") for line in lines[1:]), "usage from response.completed"


def test_restart_keeps_the_checkpoint(codex_setup, loop_thread) -> None:
    fake, summarizer, proxy, client = codex_setup
    items = coding_session(110, seed=4, api="responses")
    _, history = _codex(client, fake, items, "codex-restart")
    assert proxy.logs.events("compaction_completed")
    calls = summarizer.calls
    loop_thread.run(stop_proxy(proxy))
    again = loop_thread.run(start_proxy(proxy.settings))
    try:
        from openai import OpenAI

        from tests.conftest import API_KEY
        with OpenAI(base_url=again.base_url, api_key=API_KEY, max_retries=0) as second:
            fake.script(Reply.text("resumed"))
            second.responses.create(model=MODEL, input=history, store=False, tools=TOOLS,
                                    include=["reasoning.encrypted_content"],
                                    prompt_cache_key="codex-restart")
        assert summarizer.calls == calls, "summarized again after a restart"
        line = again.requests()[-1]
        assert line["compaction"] == "applied" and line["checkpoint"] >= 1
        assert _has_summary(_main(fake)[-1].json)
    finally:
        loop_thread.run(stop_proxy(again))
    proxy.runner = again.runner  # already stopped; the fixture's cleanup is a no-op now


def test_previous_response_id_is_passed_through(codex_setup) -> None:
    fake, _, proxy, client = codex_setup
    first = client.responses.create(model=MODEL, input="Remember the number 7.", store=True)
    fake.script(Reply.text("7"))
    second = client.responses.create(model=MODEL, input="Which number?",
                                     previous_response_id=first.id)
    assert second.output_text == "7"
    line = proxy.requests()[-1]
    assert line["previous_response_id"] is True and "passed through" in line["note"]
    assert _main(fake)[-1].json["previous_response_id"] == first.id


def test_a_conversation_keeps_its_state_upstream_and_tool_outputs_pass(codex_setup) -> None:
    """The call lives in the server-side conversation; its output must reach upstream as sent."""
    fake, _, proxy, client = codex_setup
    conversation = client.conversations.create().id  # made upstream, through the proxy
    fake.script(Reply.tool_calls(call("get_weather", {"city": "Paris"})))
    first = client.responses.create(model=MODEL, input="Weather in Paris?",
                                    conversation=conversation, tools=TOOLS)
    call_id = next(i.call_id for i in first.output if i.type == "function_call")
    output = {"type": "function_call_output", "call_id": call_id, "output": "21C"}
    fake.script(Reply.text("It is 21C."))
    second = client.responses.create(model=MODEL, input=[output], conversation=conversation,
                                     tools=TOOLS)
    assert second.output_text == "It is 21C."
    assert _main(fake)[-1].json["input"] == [output]
    line = proxy.requests()[-1]
    assert line["conversation"] is True and "passed through" in line["note"]


def test_summarizer_over_the_responses_api(make_fake, make_proxy, make_client) -> None:
    fake = make_fake(limits={"small-*": LIMIT}, always_reason=True)
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, upstreams={"fake": {"api": "responses"}})
    client = make_client(proxy.base_url)
    items = coding_session(110, seed=6, api="responses")
    _codex(client, fake, items, "codex-summarizer-responses")
    assert summarizer.calls >= 1
    body = summarizer.requests[0]
    assert "instructions" in body and body["store"] is False and "messages" not in body
    assert not {"prompt_cache_key", "user", "metadata", "tools"} & set(body)


@pytest.mark.parametrize("stream", [False, True])
def test_manual_compact_over_the_responses_api(codex_setup, stream: bool) -> None:
    fake, summarizer, proxy, client = codex_setup
    items = coding_session(40, seed=9, api="responses")
    _, history = _codex(client, fake, items, f"codex-manual-{stream}", limit_turns=8)
    before = len(_main(fake))
    command = [*history, {"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "/compact"}]}]
    kwargs = dict(model=MODEL, input=command, store=False, prompt_cache_key=f"codex-manual-{stream}")
    if stream:
        with client.responses.stream(**kwargs) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**kwargs)
    assert response.status == "completed"
    assert response.output_text.startswith("[context compaction]")
    assert len(_main(fake)) == before, "no main-model call for /compact"
    assert summarizer.calls == 1
    follow = [*command, *(item.model_dump(exclude_none=True) for item in response.output),
              {"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "Continue."}]}]
    fake.script(Reply.text("continuing"))
    client.responses.create(model=MODEL, input=follow, store=False,
                            prompt_cache_key=f"codex-manual-{stream}")
    sent = _main(fake)[-1].json["input"]
    assert _has_summary(_main(fake)[-1].json)
    assert not any("/compact" in str(i) or "[context compaction]" in str(i) for i in sent)
