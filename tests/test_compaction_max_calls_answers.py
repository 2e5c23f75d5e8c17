"""What the client is told when a summary's plan needs more calls than
`compaction.summarizer.max_calls` allows, through the official client.

It is refused before any call, by the request's content and the configuration alone: every
retry is refused the same way, so a request that does not fit without compaction gets a 400
`context_compaction_insufficient` naming the setting and the calls needed, with no
`Retry-After` (a 503 made the SDK retry twice in vain). `/compact` gets the same 400 over the
trigger; below it, the answer that the thread was kept as it is. A request that fits still goes
up with the cheap stages (`test_compaction_summarizer_calls.py`).
"""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest

from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import stages
from tests.test_compaction_failures import NO_CHEAP, _prefix
from tests.test_compaction_summarizer_calls import TINY, _over_the_trigger
from tests.test_concurrency_post_check import far_over_the_limit

MODELS = {"small-*": {"max_input_tokens": LIMIT}, "tiny-*": {"max_input_tokens": TINY}}
BOUNDED = {**NO_CHEAP, "summarizer": {"max_calls": 3}}


def _needed(allowed: int) -> re.Pattern[str]:
    return re.compile(rf"would take (\d+) summarizer calls, more than "
                      rf"compaction\.summarizer\.max_calls \({allowed}\) allows")


def _client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, timeout=60)  # retries: 2


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], thread: str, model: str):
    return client.chat.completions.with_raw_response.create(
        model=model, messages=messages, extra_headers={"x-thread-id": thread})


def _refused(proxy, messages: list[dict[str, Any]], thread: str,
             model: str) -> openai.BadRequestError:
    with _client(proxy) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, messages, thread, model)
    return caught.value


def test_a_request_over_the_limit_gets_a_400_the_sdk_does_not_retry(make_fake,
                                                                     make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT, "tiny-*": TINY})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=BOUNDED)
    error = _refused(proxy, far_over_the_limit(), "bounded", "tiny-coder")
    assert error.code == "context_compaction_insufficient"
    needed = _needed(3).search(error.message)
    assert needed is not None and int(needed.group(1)) > 3, error.message
    assert "retry-after" not in error.response.headers
    assert [line["status"] for line in proxy.requests()] == [400], "no retry in vain"
    assert summarizer.calls == 0 and stages(proxy) == ["summarize"]
    [failed] = proxy.logs.events("compaction_failed")
    assert failed["degraded"] is False


def test_compact_over_the_trigger_gets_the_same_400(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT, "tiny-*": TINY})
    summarizer = FakeSummarizer.install(fake)
    # `/compact` keeps less verbatim than `auto`: its summary of this thread takes 3 calls.
    proxy = make_proxy(fake, models=MODELS, compaction={**NO_CHEAP,
                                                        "summarizer": {"max_calls": 2}})
    messages = [*_over_the_trigger(TINY), {"role": "user", "content": "/compact"}]
    error = _refused(proxy, messages, "bounded-manual", "tiny-coder")
    assert error.code == "context_compaction_insufficient"
    assert _needed(2).search(error.message), error.message
    assert "retry-after" not in error.response.headers
    assert summarizer.calls == 0 and len(proxy.requests()) == 1


def test_compact_below_the_trigger_answers_that_the_thread_is_kept(make_fake,
                                                                   make_proxy) -> None:
    """A summarizer whose window is a fraction of the thread's: its summary takes more calls
    than allowed, but the thread, below the trigger, needs no new one."""
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={**MODELS, "mini-*": {"max_input_tokens": 2_500}},
                       compaction={**BOUNDED, "summarizer": {"model": "mini-summarizer",
                                                             "max_calls": 3}})
    messages, _ = planted_session(200, seed=2)
    below = [*_prefix(messages, 7_000, 9_000), {"role": "user", "content": "/compact"}]
    with _client(proxy) as client:
        kept = _ask(client, below, "bounded-small", MODEL)
    assert kept.headers["x-compaction"] == "none"
    text = kept.parse().choices[0].message.content
    assert _needed(3).search(text) and "unchanged" in text, text
    assert summarizer.calls == 0
