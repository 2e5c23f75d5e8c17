"""Errors through the official client: upstream's and the proxy's own raise the SDK's classes
with their code, `Retry-After` crosses the proxy and paces the SDK's retries, and a request the
SDK retries is compacted and anchored once."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from aiohttp import web

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.store.keys import thread_key_text
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL, planted_session, up_to_last_user
from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

USER = [{"role": "user", "content": "Say hello."}]


def _error(code: str | None, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": f"upstream says {code}", "type": type_, "param": None,
                      "code": code}}


@pytest.mark.parametrize("status, raised, code", [
    (400, openai.BadRequestError, "invalid_value"),
    (401, openai.AuthenticationError, "invalid_api_key"),
    (403, openai.PermissionDeniedError, "unsupported_country_region_territory"),
    (404, openai.NotFoundError, "model_not_found"),
    (409, openai.ConflictError, None),
    (413, openai.APIStatusError, "request_too_large"),
    (422, openai.UnprocessableEntityError, None),
    (429, openai.RateLimitError, "rate_limit_exceeded"),
    (500, openai.InternalServerError, None),
    (502, openai.InternalServerError, None),
    (503, openai.InternalServerError, None),
    (504, openai.InternalServerError, None),
])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_upstream_errors_raise_the_sdks_classes(client: openai.OpenAI, fake, status: int,
                                                raised: type[Exception], code: str | None,
                                                api: str) -> None:
    fake.script(Reply.error(status, _error(code)))
    with pytest.raises(raised) as caught:
        if api == "chat":
            client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
        else:
            client.responses.create(model="gpt-4o", input=USER)
    assert caught.value.status_code == status
    assert caught.value.code == code and caught.value.body["message"] == f"upstream says {code}"


@pytest.mark.parametrize("stream", [False, True])
def test_the_proxys_own_errors_raise_the_sdks_classes(make_fake, make_proxy, make_client,
                                                      stream: bool) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}},
                       threads={"fallback": "none"}, server={"max_body_mb": 1})
    client = make_client(proxy.base_url)
    messages, _ = planted_session(200)
    with pytest.raises(openai.BadRequestError) as insufficient:
        client.chat.completions.create(model=MODEL, messages=messages, stream=stream)
    assert insufficient.value.code == "context_compaction_insufficient"
    with pytest.raises(openai.BadRequestError) as responses:
        client.responses.create(model=MODEL, input=messages, stream=stream)
    assert responses.value.code == "context_compaction_insufficient"
    with pytest.raises(openai.APIStatusError) as too_large:
        client.chat.completions.create(model=MODEL, messages=[
            {"role": "user", "content": "x" * (1 << 20)}], stream=stream)
    assert (too_large.value.status_code, too_large.value.code) == (413, "request_too_large")
    assert fake.requests == []


def test_retry_after_paces_the_sdks_retry_and_the_retry_anchors_once(make_upstream, make_proxy,
                                                                      make_client, loop_thread,
                                                                      fake) -> None:
    answers = iter([429, 200])

    async def limited(request: web.Request) -> web.StreamResponse:
        status = next(answers)
        if status == 429:
            return web.json_response(_error("rate_limit_exceeded", "requests"), status=429,
                                     headers={"retry-after": "1", "x-ratelimit-remaining-requests": "0"})
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}})

    upstream = make_upstream(limited)
    proxy = make_proxy(upstream.url, tokens=COUNTED)
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=1) as client:
        started = time.monotonic()
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=USER, extra_headers={"x-thread-id": "retried"})
    assert time.monotonic() - started >= 1.0, "the SDK waited as upstream said"
    assert raw.retries_taken == 1 and raw.parse().choices[0].message.content == "Hello."
    assert [seen[2]["x-stainless-retry-count"] for seen in upstream.seen] == ["0", "1"]
    tenant = proxy.requests()[-1]["tenant"]
    state = loop_thread.run(proxy.app[SERVICES].pipeline.store.load(
        ThreadKey(tenant, thread_key_text("retried"))))
    assert len(state.anchors) == 1


def test_a_retried_request_after_a_compaction_is_not_compacted_again(make_fake, make_proxy,
                                                                     loop_thread) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    over = up_to_last_user(messages)
    fake.script(Reply.error(500, _error(None, "server_error")), Reply.text("Done."))
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=1,
                       timeout=60) as client:
        done = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=over, extra_headers={"x-thread-id": "retried-compaction"})
    assert done.retries_taken == 1 and done.parse().choices[0].message.content == "Done."
    assert summarizer.calls >= 1
    calls = summarizer.calls
    lines = proxy.requests()
    assert [line["status"] for line in lines] == [500, 200]
    assert lines[0].get("compacted") is True and not lines[1].get("compacted")
    assert lines[1]["compaction"] == "applied" and done.headers["x-compaction"] == "applied"
    state = loop_thread.run(proxy.app[SERVICES].pipeline.store.load(
        ThreadKey(lines[-1]["tenant"], thread_key_text("retried-compaction"))))
    assert state.event_count == 1 and len(state.anchors) == 1
    assert summarizer.calls == calls, "the retry summarized nothing"
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert main[0].body == main[1].body, "the retry sent the same projection"


def test_the_proxys_503_paces_the_sdks_retry_by_its_retry_after(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=1,
                       timeout=60) as client:
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model=MODEL, messages=messages,
                                           extra_headers={"x-thread-id": "unavailable"})
    assert time.monotonic() - started >= 1.0, "the SDK waited the proxy's Retry-After"
    assert (caught.value.status_code, caught.value.code) == (503, "compaction_unavailable")
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert [line["status"] for line in proxy.requests()] == [503, 503]
    assert not [r for r in fake.requests if not is_summarizer_request(r.json)], \
        "an over-long request was never forwarded"
