"""The summarizer refusing the conversation's content inside an HTTP 200, through the official
client: a chat `refusal` or `finish_reason: content_filter` (Azure's with its
`content_filter_results`), a Responses `refusal` content part or `status: incomplete` for
`content_filter`, a failed response whose error is the content policy's `invalid_prompt`.

Each is the outcome of the content policy's HTTP 400: the client's 400 with a content code (the
SDK does not retry it), none of the upstream's text, nothing kept as a summary (a filtered
answer may hold part of one), and the breaker every tenant shares does not count it.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from proxy.testing.summarizer import REFUSAL_TEXT, FakeSummarizer
from tests.compaction_session import LIMIT
from tests.conftest import API_KEY
from tests.test_compaction_detached import GatedFake, gated  # noqa: F401
from tests.test_compaction_failure_paths import between_trigger_and_limit, over_the_limit, post
from tests.test_concurrency_same_thread import queued_behind
from tests.test_summarizer_client_refusals import (MODELS, OWN_KEY, _ask, _client,
                                                    another_thread_compacts)
from tests.test_summarizer_content_refusals import ONE_FAILURE_OPENS

# (the summarizer's API, the shape of its 200, the code the client gets)
REFUSALS = [("chat", "refusal", "refusal"), ("chat", "content_filter", "content_filter"),
            ("responses", "refusal", "refusal"),
            ("responses", "content_filter", "content_filter"),
            ("responses", "failed_invalid_prompt", "invalid_prompt")]


def _refusing(make_fake, make_proxy, api: str, shapes: list[str], own_key: bool = False):
    fake: FakeUpstream = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, shapes=shapes)
    upstream: dict[str, Any] = {"api": api, **({"api_key": OWN_KEY} if own_key else {})}
    proxy = make_proxy(fake, models=MODELS, compaction=ONE_FAILURE_OPENS,
                       upstreams={"fake": upstream})
    return fake, summarizer, proxy


def _nothing_passed_on(proxy, text: str) -> None:
    """None of the refusal, of the filtered summary, of what Azure flagged."""
    for said in (text, proxy.logs.text):
        assert REFUSAL_TEXT not in said and "FACT:" not in said
        assert "violence" not in said and "flagged as potentially" not in said


@pytest.mark.parametrize("own_key", [False, True], ids=["clients-key", "proxys-key"])
@pytest.mark.parametrize(("api", "shape", "code"), REFUSALS,
                         ids=[f"{api}-{shape}" for api, shape, _ in REFUSALS])
def test_a_refusal_in_a_200_is_the_clients_400_not_counted(
        make_fake, make_proxy, api: str, shape: str, code: str, own_key: bool) -> None:
    fake, summarizer, proxy = _refusing(make_fake, make_proxy, api, [shape], own_key)
    with _client(proxy, API_KEY) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, over_the_limit(), "refused-in-200")
    error = caught.value
    assert (error.code, error.type) == (code, "invalid_request_error")
    assert "in its answer" in error.message and "new thread" in error.message
    assert "retry-after" not in error.response.headers
    assert [line["status"] for line in proxy.requests()] == [400], "no retry in vain"
    assert summarizer.calls == 1
    [failed] = proxy.logs.events("compaction_failed")
    assert failed["stage"] == "summarize" and "in its answer" in failed["error"]
    assert not proxy.logs.events("compaction_completed"), "a filtered answer kept as a summary"
    _nothing_passed_on(proxy, error.response.text)
    # Not counted: with `breaker.failures: 1` a counted failure would have opened it.
    another_thread_compacts(fake, proxy, "another-thread")


def test_a_refusal_on_a_request_that_fits_still_goes_up(make_fake, make_proxy) -> None:
    fake, _, proxy = _refusing(make_fake, make_proxy, "chat", ["content_filter"])
    fake.script(Reply.text("answered with the cheap stages"))
    with _client(proxy, API_KEY, retries=0) as client:
        answer = _ask(client, between_trigger_and_limit(), "fits")
    assert answer.parse().choices[0].message.content == "answered with the cheap stages"
    assert proxy.requests()[0]["compaction_degraded"] == "summarize"
    assert not proxy.logs.events("compaction_completed")


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_compact_of_content_refused_in_a_200_gets_the_same_400(make_fake, make_proxy,
                                                               api: str) -> None:
    _, _, proxy = _refusing(make_fake, make_proxy, api, ["refusal"])
    command = [*over_the_limit(), {"role": "user", "content": "/compact"}]
    with _client(proxy, API_KEY) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, command, "refused-manual")
    assert caught.value.code == "refusal"
    assert [line["status"] for line in proxy.requests()] == [400]
    _nothing_passed_on(proxy, caught.value.response.text)


def test_a_refusal_at_a_later_step_of_a_rolling_summary_refuses_it_whole(make_fake,
                                                                          make_proxy) -> None:
    """The first chunk's summary is good; the second step's answer is filtered: the partial
    summary of the prefix is not kept, and nothing is counted."""
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, shapes=[None, "content_filter"])
    proxy = make_proxy(fake, models={**MODELS, "tiny-*": {"max_input_tokens": 4_000}},
                       compaction={**ONE_FAILURE_OPENS,
                                   "summarizer": {"model": "tiny-summarizer"}})
    with _client(proxy, API_KEY) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, over_the_limit(), "rolling")
    assert caught.value.code == "content_filter"
    [started] = proxy.logs.events("compaction_started")
    assert started["summarizer_calls"] > 2 and summarizer.calls == 2
    assert not proxy.logs.events("compaction_completed")
    another_thread_compacts(fake, proxy, "another-rolling")


def test_requests_queued_behind_a_refusal_in_a_200_share_its_400(loop_thread, gated: GatedFake,
                                                                 make_proxy) -> None:
    """The same content queued on the thread's lock gets the same 400 without asking again,
    and the breaker (one counted failure opens it) still lets another thread compact."""
    summarizer = FakeSummarizer.install(gated, shapes=["refusal"])
    proxy = make_proxy(gated, models=MODELS, compaction=ONE_FAILURE_OPENS)
    over = over_the_limit()
    answers = queued_behind(loop_thread, gated, proxy, over, [over, over], "queued-refusal")
    assert [a.status_code for a in answers] == [400] * 3
    assert {a.json()["error"]["code"] for a in answers} == {"refusal"}
    assert summarizer.calls == 1
    failed = proxy.logs.events("compaction_failed")
    assert [bool(f.get("shared")) for f in failed] == [False, True, True]
    gated.script(Reply.text("another thread"))
    assert post(proxy, over, "another-thread").headers["x-compaction"] == "compacted"
