"""The summarizer's upstream refusing or rate-limiting the client's own credential (it has no
`api_key`, so the request's Authorization went to it), through the official client.

A request that does not fit without compaction gets that answer itself: the upstream's 401 or
403 (the SDK does not retry it in vain), its 429 with the upstream's `Retry-After` (the SDK
waits that out, and its retry compacts). The breaker every tenant shares counts none of them.
With the proxy's own key the same 429 is the summarizer's failure, counted as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from aiohttp import web

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL
from tests.conftest import API_KEY
from tests.test_compaction_detached import GatedFake, open_gate
from tests.test_compaction_failure_paths import (between_trigger_and_limit, over_the_limit, post,
                                                 stages, wait_for)
from tests.test_compaction_failures import NO_CHEAP
from tests.test_concurrency_same_thread import waiting

MODELS = {"small-*": {"max_input_tokens": LIMIT}}
REVOKED = "sk-revoked-0123456789abcdef"
OWN_KEY = "sk-proxy-own-0123456789abcdef"
ONE_FAILURE_OPENS = {**NO_CHEAP, "breaker": {"failures": 1}}
INVALID_KEY = {"error": {"message": f"Incorrect API key provided: {REVOKED}.",
                         "type": "invalid_request_error", "param": None,
                         "code": "invalid_api_key"}}
NO_ACCESS = {"error": {"message": f"Project of key {REVOKED} has no access to the model.",
                       "type": "invalid_request_error", "param": None,
                       "code": "model_not_found"}}
RATE_LIMITED = {"error": {"message": "Rate limit reached for small-coder in organization "
                                     "org-test on tokens per min (TPM): Limit 30000, Used 29000, "
                                     "Requested 2000. Please try again in 17s.",
                          "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}


class RefusingFake(FakeUpstream):
    """The fake upstream, whose summary requests authorized with a key in `refusals` are
    answered, while any are left, with the next of them: (status, body, headers)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.refusals: dict[str, list[tuple[int, Any, dict[str, str]]]] = {}
        self.refused = 0

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        async def refusing(request: web.Request) -> web.StreamResponse:
            recorded = self.recorded(request)
            left = self.refusals.get(recorded.headers.get("authorization", ""))
            if left and is_summarizer_request(recorded.json):
                status, body, headers = left.pop(0)
                self.refused += 1
                return web.json_response(body, status=status, headers=headers)
            return await handler(request)

        return await super()._middleware(request, refusing)

    def refuse(self, key: str, status: int, body: Any, headers: dict[str, str] | None = None,
               times: int = 100) -> None:
        self.refusals[f"Bearer {key}"] = [(status, body, headers or {})] * times


@pytest.fixture
def refusing(loop_thread) -> Iterator[RefusingFake]:
    fake = RefusingFake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    loop_thread.run(fake.start())
    yield fake
    loop_thread.run(fake.stop())


def _client(proxy, key: str, retries: int = 2) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, timeout=60, max_retries=retries)


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], thread: str):
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers={"x-thread-id": thread})


@pytest.mark.parametrize(("status", "body", "raised"), [
    (401, INVALID_KEY, openai.AuthenticationError),
    (403, NO_ACCESS, openai.PermissionDeniedError)])
def test_a_refused_credential_is_the_clients_own_error_not_a_503_retried_in_vain(
        refusing: RefusingFake, make_proxy, status: int, body: Any, raised: type) -> None:
    refusing.refuse(REVOKED, status, body)
    proxy = make_proxy(refusing, models=MODELS, compaction=ONE_FAILURE_OPENS)
    with _client(proxy, REVOKED) as client, pytest.raises(raised) as caught:
        _ask(client, over_the_limit(), "revoked")
    error = caught.value
    assert error.status_code == status
    assert error.code == body["error"]["code"]  # the upstream's own code, passed on
    assert "summarizer's upstream refused this request's credential" in error.message
    assert REVOKED not in error.response.text and "revoked-0123" not in error.response.text
    assert "retry-after" not in error.response.headers
    assert [line["status"] for line in proxy.requests()] == [status], "no retry in vain"
    assert refusing.refused == 1
    # The breaker (opened by one failure here) did not count it: another tenant compacts.
    another_thread_compacts(refusing, proxy, "another-tenant")


def another_thread_compacts(refusing: RefusingFake, proxy: Any, thread: str) -> None:
    """Another thread's compaction runs: the breaker, which one counted failure opens in these
    tests, did not count the refusal before."""
    refusing.script(Reply.text(f"compacted for {thread}"))
    with _client(proxy, API_KEY, retries=0) as client:
        other = _ask(client, over_the_limit(), thread)
    assert other.headers["x-compaction"] == "compacted"
    assert stages(proxy) == ["summarize"]


def test_compact_with_a_refused_credential_gets_the_clients_401(refusing: RefusingFake,
                                                                  make_proxy) -> None:
    refusing.refuse(REVOKED, 401, INVALID_KEY)
    proxy = make_proxy(refusing, models=MODELS, compaction=NO_CHEAP)
    command = [*between_trigger_and_limit(), {"role": "user", "content": "/compact"}]
    with _client(proxy, REVOKED) as client, pytest.raises(openai.AuthenticationError) as caught:
        _ask(client, command, "revoked-manual")
    assert caught.value.code == "invalid_api_key"
    assert [line["status"] for line in proxy.requests()] == [401]


def test_a_refused_credential_on_a_request_that_fits_still_goes_up(refusing: RefusingFake,
                                                                    make_proxy) -> None:
    """Forwarded with the cheap stages as any failed summary: the upstream then answers the
    same credential with its own 401, relayed as it came."""
    refusing.refuse(REVOKED, 401, INVALID_KEY)
    refusing.script(Reply.error(401, INVALID_KEY))
    proxy = make_proxy(refusing, models=MODELS, compaction=NO_CHEAP)
    with _client(proxy, REVOKED, retries=0) as client, \
            pytest.raises(openai.AuthenticationError) as caught:
        _ask(client, between_trigger_and_limit(), "fits")
    assert caught.value.body == INVALID_KEY["error"], "the upstream's own answer"
    [line] = proxy.requests()
    assert line["compaction_degraded"] == "summarize"
    main = [r for r in refusing.requests if not is_summarizer_request(r.json)]
    assert len(main) == 1


def test_the_clients_rate_limit_is_a_429_with_the_upstreams_retry_after(
        refusing: RefusingFake, make_proxy) -> None:
    refusing.refuse(API_KEY, 429, RATE_LIMITED, {"Retry-After": "17", "retry-after-ms": "16500"},
                    times=1)
    proxy = make_proxy(refusing, models=MODELS, compaction=ONE_FAILURE_OPENS)
    with _client(proxy, API_KEY, retries=0) as client, \
            pytest.raises(openai.RateLimitError) as caught:
        _ask(client, over_the_limit(), "limited")
    error = caught.value
    assert error.response.headers["retry-after"] == "17"
    assert error.response.headers["retry-after-ms"] == "16500"
    assert error.code == "rate_limit_exceeded" and error.type == "tokens"
    assert "Please try again in 17s" in error.message  # which limit, and how long
    assert stages(proxy) == ["summarize"]
    assert proxy.requests()[0]["status"] == 429
    # Not counted: with `breaker.failures: 1` a counted failure would have opened it.
    refusing.script(Reply.text("compacted once the limit allows"))
    with _client(proxy, API_KEY, retries=0) as client:
        later = _ask(client, over_the_limit(), "limited-later")
    assert later.headers["x-compaction"] == "compacted"


def test_the_sdk_waits_out_the_rate_limit_and_its_retry_compacts(refusing: RefusingFake,
                                                                  make_proxy) -> None:
    refusing.refuse(API_KEY, 429, RATE_LIMITED, {"Retry-After": "1"}, times=1)
    proxy = make_proxy(refusing, models=MODELS, compaction=ONE_FAILURE_OPENS)
    refusing.script(Reply.text("Done."))
    with _client(proxy, API_KEY) as client:
        done = _ask(client, over_the_limit(), "limited-once")
    assert done.retries_taken == 1 and done.parse().choices[0].message.content == "Done."
    assert done.headers["x-compaction"] == "compacted"
    assert [line["status"] for line in proxy.requests()] == [429, 200]


def test_a_429_on_the_proxys_own_key_still_opens_the_breaker(refusing: RefusingFake,
                                                             make_proxy) -> None:
    """The proxy's own quota is everyone's: the summarizer's failure, a 503, counted."""
    refusing.refuse(OWN_KEY, 429, RATE_LIMITED, {"Retry-After": "17"})
    proxy = make_proxy(refusing, models=MODELS, compaction=ONE_FAILURE_OPENS,
                       upstreams={"fake": {"api_key": OWN_KEY}})
    with _client(proxy, API_KEY, retries=0) as client:
        answers = []
        for n in range(2):
            with pytest.raises(openai.InternalServerError) as caught:
                _ask(client, over_the_limit(), f"own-quota-{n}")
            answers.append(caught.value)
    assert [a.status_code for a in answers] == [503, 503]
    assert stages(proxy) == ["summarize", "breaker_open"]
    assert refusing.refused == 1


class GatedRefusingFake(RefusingFake, GatedFake):
    """Summary requests wait at the gate, then are refused as `refusals` says."""


def queued_behind(loop_thread, make_proxy,
                  waits: dict[str, str]) -> tuple[list[Any], GatedRefusingFake, Any]:
    """Two requests of one thread over the limit, the second queued behind the first's
    compaction, whose summarizer call the upstream answers 429 with `waits`: their answers,
    the fake and the proxy."""
    fake = GatedRefusingFake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    loop_thread.run(fake.start())
    try:
        fake.refuse(API_KEY, 429, RATE_LIMITED, waits)
        proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(post, proxy, over_the_limit(), "queued")
            wait_for(lambda: fake.summarizer_requests >= 1)
            second = pool.submit(post, proxy, over_the_limit(), "queued")
            wait_for(lambda: waiting(proxy, "queued") == 1)
            open_gate(loop_thread, fake)
            answers = [first.result(), second.result()]
    finally:
        open_gate(loop_thread, fake)
        loop_thread.run(fake.stop())
    return answers, fake, proxy


def test_a_request_queued_behind_shares_the_refusal_of_its_credential(loop_thread,
                                                                      make_proxy) -> None:
    """The thread's key names the credential, so the request that waited presented the one
    just rate-limited: it gets the same 429, without a summary request of its own."""
    answers, fake, proxy = queued_behind(loop_thread, make_proxy, {"Retry-After": "17"})
    assert [a.status_code for a in answers] == [429, 429]
    assert [a.headers["retry-after"] for a in answers] == ["17", "17"]
    assert answers[1].json()["error"]["code"] == "rate_limit_exceeded"
    assert fake.refused == 1
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], bool(f.get("shared"))) for f in failed] == [
        ("summarize", False), ("summarize", True)]
