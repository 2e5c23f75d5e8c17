"""The official client's own retries (twice by default, after the proxy's `Retry-After`) against
a summarizer that fails: each retry asks the summarizer again. A transient failure heals on the
retry, which is what the SDK retries for; a summarizer failing every time fails every attempt,
and those are consecutive failures of real calls, which the breaker is there to count."""

from __future__ import annotations

import openai
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import over_the_limit
from tests.test_compaction_failures import NO_CHEAP

MODELS = {"small-*": {"max_input_tokens": LIMIT}}


def _client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, timeout=60)  # default retries


def test_the_sdks_retry_gets_its_own_summary_after_a_transient_summarizer_failure(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=1)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    fake.script(Reply.text("Done."))
    with _client(proxy) as client:
        done = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=over_the_limit(), extra_headers={"x-thread-id": "blip"})
    assert done.retries_taken == 1 and done.parse().choices[0].message.content == "Done."
    assert done.headers["x-compaction"] == "compacted"
    assert [line["status"] for line in proxy.requests()] == [503, 200]
    first, second = proxy.logs.events("compaction_started")
    assert summarizer.calls == 1 + second["summarizer_calls"], "the retry summarized anew"


def test_one_sdk_call_against_a_failing_summarizer_makes_three_attempts(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    with _client(proxy) as client, pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model=MODEL, messages=over_the_limit(),
                                       extra_headers={"x-thread-id": "down"})
    assert summarizer.calls == 3
    assert [f["stage"] for f in proxy.logs.events("compaction_failed")] == ["summarize"] * 3
    # The third consecutive failure opened the breaker (`breaker.failures: 3`): the last 503
    # says to wait its cooldown, not the 1 s of a closed breaker.
    assert int(caught.value.response.headers["retry-after"]) > 1
    assert [line["status"] for line in proxy.requests()] == [503] * 3
