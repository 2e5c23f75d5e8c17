"""A summarizer whose real window is smaller than its profile says, and a re-plan that would
take more calls than `compaction.summarizer.max_calls` allows, through the official client.

The summarizer's upstream refuses the planned steps as too long; re-planned in halves of its
window, the summary would need more calls than allowed. The same content and configuration
end the same way on every retry, and the summarizer is not unhealthy: a request that does not
fit gets the 400 `context_compaction_insufficient` a plan over `max_calls` gets (naming the
bound, the calls needed, and the window setting that is too large), with no `Retry-After`, so
the SDK does not retry it; the breaker every tenant shares does not count it. Chat and
Responses, streamed or not, and `/compact` over the trigger.
"""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest

from proxy.server.client_owned import window_setting
from proxy.settings import ModelProfile
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import stages
from tests.test_summarizer_content_refusals import ONE_FAILURE_OPENS

SUMMARIZER = "summarizer-1"
# The summarizer's profile says 100,000 tokens; its upstream takes 4,000.
FAKE_LIMITS = {"small-*": LIMIT, "summarizer-*": 4_000}
MODELS = {"small-*": {"max_input_tokens": LIMIT},
          "summarizer-*": {"max_input_tokens": 100_000}}
# One counted failure would open the breaker (for the whole test, however slow the machine).
COMPACTION = {**ONE_FAILURE_OPENS, "summarizer": {"model": SUMMARIZER, "max_calls": 3}}
NEEDED = re.compile(r"would take (\d+) summarizer calls, more than "
                    r"compaction\.summarizer\.max_calls \(3\) allows")


def conversation(turns: int, marker: str = "") -> list[dict[str, Any]]:
    """Plain text turns (both APIs take them as they are), the last a user's."""
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        words = " ".join(f"line{n}-{w}{marker}" for w in range(120))
        messages += [{"role": "user", "content": f"Question {n}: {words}"},
                     {"role": "assistant", "content": f"Answer {n}: {words}"}]
    return [*messages, {"role": "user", "content": "And next?"}]


OVER_THE_LIMIT = 21  # turns: about 1.3 times the model's limit


def _setup(make_fake, make_proxy):
    fake = make_fake(limits=FAKE_LIMITS)
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=COMPACTION)
    return fake, summarizer, proxy


def _assert_refused_for_good(error: openai.APIStatusError) -> None:
    assert error.status_code == 400
    assert error.code == "context_compaction_insufficient"
    needed = NEEDED.search(error.message)
    assert needed is not None and int(needed.group(1)) > 3, error.message
    assert "refused its planned steps as too long" in error.message
    assert "models.summarizer-*.max_input_tokens" in error.message
    assert "retry-after" not in error.response.headers
    assert "retry-after-ms" not in error.response.headers


def _chat(client: openai.OpenAI, thread: str, stream: bool) -> None:
    messages = conversation(OVER_THE_LIMIT, thread)
    if stream:
        with client.chat.completions.create(model=MODEL, messages=messages, stream=True,
                                            extra_headers={"x-thread-id": thread}) as chunks:
            list(chunks)
    else:
        client.chat.completions.create(model=MODEL, messages=messages,
                                       extra_headers={"x-thread-id": thread})


def _responses(client: openai.OpenAI, thread: str, stream: bool) -> None:
    items = conversation(OVER_THE_LIMIT, thread)
    if stream:
        with client.responses.create(model=MODEL, input=items, stream=True,
                                     extra_headers={"x-thread-id": thread}) as events:
            list(events)
    else:
        client.responses.create(model=MODEL, input=items, extra_headers={"x-thread-id": thread})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("ask", [_chat, _responses], ids=["chat", "responses"])
def test_a_replan_over_max_calls_is_a_400_neither_retried_nor_counted(make_fake, make_proxy,
                                                                       ask, stream) -> None:
    fake, summarizer, proxy = _setup(make_fake, make_proxy)
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, timeout=60) as client:
        for thread in ("first", "second"):  # the SDK's default: 2 retries of a 5xx
            with pytest.raises(openai.BadRequestError) as caught:
                ask(client, thread, stream)
            _assert_refused_for_good(caught.value)
    assert [line["status"] for line in proxy.requests()] == [400, 400], "no retry in vain"
    # Counted, the first would have opened the breaker: the second would not have been tried.
    assert stages(proxy) == ["summarize", "summarize"]
    asked = [r for r in fake.requests if is_summarizer_request(r.json)]
    # Each: the plans for 100,000 and 50,000 tokens refused; the one for 25,000 would take 2.
    assert len(asked) == 4 and summarizer.calls == 0
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert main == [], "the over-long request is never forwarded"


def test_compact_over_the_trigger_gets_the_same_400(make_fake, make_proxy) -> None:
    fake, summarizer, proxy = _setup(make_fake, make_proxy)
    command = [*conversation(OVER_THE_LIMIT - 7)[:-1], {"role": "user", "content": "/compact"}]
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, timeout=60) as client, \
            pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=command,
                                       extra_headers={"x-thread-id": "manual"})
    _assert_refused_for_good(caught.value)
    assert [line["status"] for line in proxy.requests()] == [400]
    assert summarizer.calls == 0 and stages(proxy) == ["summarize"]


def test_the_error_names_the_setting_the_window_came_from() -> None:
    assert window_setting(ModelProfile("sum-*", context_window=32_000), 27_904) == (
        "models.sum-*.context_window (27,904 tokens usable)")
    for none in (None, ModelProfile("sum-*")):
        assert window_setting(none, 100_000).startswith(
            "compaction.fallback_trigger_tokens (100,000 tokens: the summarizer's model has no "
            "profile")
