"""A summarizer's HTTP 200 that holds no usable summary, through the official client: cut at
its output budget, a tool call, reasoning only, no choice or no output at all, a response not
finished. Each is the summarizer's failure: the client's 503 says which (a cut one names the
setting to raise), the breaker counts it, and nothing of it is kept as a summary.
"""

from __future__ import annotations

import openai
import pytest

from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import over_the_limit, stages
from tests.test_summarizer_client_refusals import MODELS, _ask, _client
from tests.test_summarizer_content_refusals import ONE_FAILURE_OPENS

# (the summarizer's API, the shape of its 200, words of the reason the client and the log get)
WITHOUT_SUMMARY = [
    ("chat", "tool_call", "holds no summary, a tool call (finish_reason: tool_calls)"),
    ("responses", "tool_call", "holds no summary, a tool call (status: completed)"),
    ("chat", "reasoning_only", "holds no summary, only reasoning"),
    ("responses", "reasoning_only", "holds no summary, only reasoning"),
    ("chat", "no_output", "holds no summary, no choices"),
    ("responses", "no_output", "holds no summary, no output items"),
    ("responses", "unfinished", "is not finished (status: in_progress)"),
]


def _proxy(make_fake, make_proxy, api: str, **options):
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, **options)
    proxy = make_proxy(fake, models=MODELS, compaction=ONE_FAILURE_OPENS,
                       upstreams={"fake": {"api": api}})
    return summarizer, proxy


def _counted_failure(proxy, said: str) -> None:
    """A 503 saying `said`, then the breaker (one counted failure opens it) refuses the next."""
    with _client(proxy, API_KEY, retries=0) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            _ask(client, over_the_limit(), "no-summary")
        assert caught.value.status_code == 503 and said in caught.value.message
        with pytest.raises(openai.InternalServerError):
            _ask(client, over_the_limit(), "no-summary-again")
    assert stages(proxy) == ["summarize", "breaker_open"]
    assert said in proxy.logs.events("compaction_failed")[0]["error"]
    assert not proxy.logs.events("compaction_completed")


@pytest.mark.parametrize(("api", "shape", "said"), WITHOUT_SUMMARY,
                         ids=[f"{api}-{shape}" for api, shape, _ in WITHOUT_SUMMARY])
def test_a_200_without_a_summary_is_a_counted_failure_that_says_why(
        make_fake, make_proxy, api: str, shape: str, said: str) -> None:
    summarizer, proxy = _proxy(make_fake, make_proxy, api, shapes=[shape])
    _counted_failure(proxy, said)
    assert summarizer.calls == 1


@pytest.mark.parametrize(("api", "said"), [
    ("chat", "finish_reason: length"),
    ("responses", "status: incomplete, incomplete_details.reason: max_output_tokens")])
def test_a_summary_cut_at_its_output_budget_is_a_counted_failure_naming_the_setting(
        make_fake, make_proxy, api: str, said: str) -> None:
    """Never kept as complete: the end it lost would be gone for good with the prefix it
    stands for. Not retried with a larger budget either: the plan reserved this one for it."""
    summarizer, proxy = _proxy(make_fake, make_proxy, api, cut_short=1)
    _counted_failure(proxy, f"cut short at its output limit ({said}): "
                            "compaction.summarizer.max_output_tokens (4,096 tokens)")
    assert summarizer.calls == 1
    assert summarizer.requests[0]["max_output_tokens" if api == "responses"
                                  else "max_tokens"] == 4096
