"""A chat request the proxy has nothing to do for goes up as the client sent it, without the
work that could only confirm that (`proxy/server/untouched.py`): plain messages, a body under
half the trigger in bytes, a thread with no checkpoint, mark or anchor."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.server import untouched as untouched_module
from proxy.testing.replies import Reply, call
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.conftest import API_KEY
from tests.harness import COUNTED, loaded_state
from tests.strategies import conversations
from tests.test_needs_nothing import plain_messages

PLAIN = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]


def _post(proxy: Any, doc: dict[str, Any] | bytes, thread: str = "quiet",
          stream: bool = False) -> tuple[bytes, httpx.Response]:
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=body, timeout=30,
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               "authorization": f"Bearer {API_KEY}"}) as answer:
        answer.read()
    return body, answer


def test_a_plain_small_request_goes_up_as_sent_and_its_line_says_so(loop_thread, proxy,
                                                                   fake) -> None:
    body, answer = _post(proxy, {"model": "gpt-4o", "messages": PLAIN})
    assert answer.status_code == 200
    assert fake.requests[-1].body == body
    assert answer.headers["x-compaction"] == "none"
    assert "x-context-tokens" not in answer.headers, "not counted: no estimate to give"
    [line] = proxy.requests()
    assert line["tokens_at_most"] == len(body) and line["compaction"] == "none"
    assert "tokens_estimate" not in line
    assert line["usage_input"] == answer.json()["usage"]["prompt_tokens"] > 0
    state = loaded_state(loop_thread, proxy, "quiet")
    assert state.anchors == (), "nothing an anchor could decide while the thread is this small"
    assert state.last_activity is not None, "its activity still counts for microcompaction"


def test_a_stream_gets_its_usage_asked_for_and_hidden_as_on_the_whole_way(proxy, fake) -> None:
    doc = {"model": "gpt-4o", "messages": PLAIN, "stream": True}
    body, answer = _post(proxy, doc)
    assert answer.status_code == 200
    sent = orjson.loads(fake.requests[-1].body)
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == PLAIN
    events = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert not any('"usage"' in e and json.loads(e).get("usage") for e in events[:-1])
    [line] = proxy.requests()
    assert line["usage_chunk_hidden"] is True and line["usage_input"] > 0
    assert line["tokens_at_most"] == len(body)


def test_a_body_over_half_the_trigger_goes_the_whole_way(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, models={"gpt-4o*": {"max_input_tokens": 4_000}})  # trigger 3,000
    small = {"model": "gpt-4o", "messages": PLAIN}
    body, answer = _post(proxy, small, thread="small")
    assert len(body) * 2 <= 3_000 and "x-context-tokens" not in answer.headers
    big = {"model": "gpt-4o", "messages": [*PLAIN, {"role": "user", "content": "x " * 800}]}
    body, answer = _post(proxy, big, thread="big")
    assert len(body) * 2 > 3_000
    assert fake.requests[-1].body == body, "still sent as it came: it is only counted"
    assert int(answer.headers["x-context-tokens"]) > 0
    assert "tokens_estimate" in proxy.requests()[-1]


def test_a_thread_with_an_anchor_goes_the_whole_way_from_then_on(loop_thread, proxy,
                                                                 fake) -> None:
    tools = [{"type": "function", "function": {"name": "read_file",
                                               "parameters": {"type": "object"}}}]
    fake.script(Reply.tool_calls(call("read_file", {"path": "a.py"}, id="c1")),
                Reply.text("done"))
    doc = {"model": "gpt-4o", "messages": PLAIN, "tools": tools}
    _, first = _post(proxy, doc, thread="anchored")
    assert "x-context-tokens" not in first.headers, "tools alone leave a request plain"
    # The tool round trip is not plain: it goes the whole way, and its answer is anchored.
    called = first.json()["choices"][0]["message"]
    doc["messages"] = [*PLAIN, called, {"role": "tool", "tool_call_id": "c1", "content": "x = 1"}]
    _, second = _post(proxy, doc, thread="anchored")
    assert int(second.headers["x-context-tokens"]) > 0
    assert loaded_state(loop_thread, proxy, "anchored").anchors
    # A later plain request of that thread (the client trimmed its list) is counted.
    _, later = _post(proxy, {"model": "gpt-4o", "messages": PLAIN}, thread="anchored")
    assert "x-context-tokens" in later.headers
    # Another thread's plain request is not.
    _, other = _post(proxy, {"model": "gpt-4o", "messages": PLAIN}, thread="fresh")
    assert "x-context-tokens" not in other.headers


def test_a_lone_compact_command_is_still_the_proxys_to_answer(proxy, fake) -> None:
    before = len(fake.requests)
    messages = [*PLAIN, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "/compact"}]
    _, answer = _post(proxy, {"model": "gpt-4o", "messages": messages})
    assert answer.status_code == 200
    assert len(fake.requests) == before, "a manual compaction never calls the main model"
    assert proxy.requests()[-1].get("manual_compact")


def test_an_overflow_of_a_request_sent_as_it_came_still_buys_its_compaction(make_fake,
                                                                            make_proxy) -> None:
    """A model without a profile whose real window is far below the fallback trigger: the body
    is under half of 100,000 in bytes, so it goes up as it came; the upstream's overflow then
    buys the one compaction and retry it would have bought on the whole way (SPEC §9)."""
    fake = make_fake(limits={"small-window-*": 3_000})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for n in range(30):
        messages += [{"role": "user", "content": f"Question {n}: " + "tell me more " * 20},
                     {"role": "assistant", "content": f"Answer {n}: " + "here is more " * 20}]
    messages.append({"role": "user", "content": "And now?"})
    fake.script(Reply.text("next"))
    body, answer = _post(proxy, {"model": "small-window-model", "messages": messages})
    assert len(body) * 2 < 100_000
    assert answer.status_code == 200, answer.text
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert main[0].body == body, "the first attempt was the client's bytes"
    assert len(main) == 2 and len(main[1].body) < len(body), "then the compacted retry"
    assert [e["forced"] for e in proxy.logs.events("compaction_started")] == [True]


@pytest.fixture
def twin_proxies(make_fake, make_proxy) -> Any:
    fake = make_fake()
    return fake, make_proxy(fake), make_proxy(fake)


options = st.sampled_from(({}, {"stream_options": None}, {"stream_options": {}},
                           {"stream_options": {"include_usage": False}},
                           {"stream_options": {"include_usage": True}},
                           {"stream_options": {"include_obfuscation": False}}))
huge = st.sampled_from(({}, {"seed": 123456789012345678901234567890}))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(messages=st.one_of(plain_messages, conversations("chat")), stream=st.booleans(),
       options=options, huge=huge)
def test_the_short_way_sends_what_the_whole_way_would(twin_proxies, monkeypatch, messages,
                                                      stream, options, huge) -> None:
    """Any chat request: the upstream gets the same bytes, the client the same `x-compaction`
    and the line the same usage, whether or not the short way was open to it."""
    fake, short, whole = twin_proxies
    doc = {"model": "gpt-4o", "messages": messages, "stream": stream, **options}
    body = json.dumps({**doc, **huge}).encode()  # orjson writes no integer past 64 bits
    thread = uuid.uuid4().hex
    before = len(fake.requests)
    _, answer = _post(short, body, thread=thread)
    sent_short = [r.body for r in fake.requests[before:]]
    before = len(fake.requests)
    with monkeypatch.context() as patched:
        patched.setattr(untouched_module, "needs_nothing", lambda *_: False)
        _, answer_whole = _post(whole, body, thread=thread)
    assert [r.body for r in fake.requests[before:]] == sent_short
    assert answer.status_code == answer_whole.status_code
    assert answer.headers.get("x-compaction") == answer_whole.headers.get("x-compaction")
    # Not `usage_cached`: the fake's prompt cache has the first one's prompt by the second.
    usage = ("usage_input", "usage_output", "usage_reasoning")
    line, line_whole = short.requests()[-1], whole.requests()[-1]
    assert [line.get(k) for k in usage] == [line_whole.get(k) for k in usage]


def test_counting_every_request_is_a_setting(make_fake, make_proxy, loop_thread) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, tokens=COUNTED)
    body, answer = _post(proxy, {"model": "gpt-4o", "messages": PLAIN}, thread="counted")
    assert fake.requests[-1].body == body
    assert int(answer.headers["x-context-tokens"]) > 0
    assert "tokens_at_most" not in proxy.requests()[-1]
    assert loaded_state(loop_thread, proxy, "counted").anchors


def test_over_redis_a_thread_another_instance_anchored_goes_the_whole_way(
        make_fake, make_proxy, redis_url: str, redis_prefix: str) -> None:
    """Instances share only the store: the short way reads the thread from Redis, so what one
    instance anchored sends the thread's next plain request the whole way at the other."""
    fake = make_fake()
    state = {"backend": "redis", "redis": {"url": redis_url, "prefix": redis_prefix}}
    counting = make_proxy(fake, state=state, tokens=COUNTED)
    plain = make_proxy(fake, state=state)
    _, first = _post(plain, {"model": "gpt-4o", "messages": PLAIN}, thread="shared")
    assert "x-context-tokens" not in first.headers
    _, counted = _post(counting, {"model": "gpt-4o", "messages": PLAIN}, thread="shared")
    assert int(counted.headers["x-context-tokens"]) > 0
    messages = [*PLAIN, counted.json()["choices"][0]["message"],
                {"role": "user", "content": "And?"}]
    _, then = _post(plain, {"model": "gpt-4o", "messages": messages}, thread="shared")
    assert int(then.headers["x-context-tokens"]) > 0, "the anchor the other one wrote"
    assert plain.requests()[-1]["anchor_used"] is True
