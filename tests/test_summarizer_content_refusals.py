"""The summarizer's upstream refusing the conversation's content by its content policy, through
the official client: OpenAI's 400 `invalid_prompt`, Azure OpenAI's 400 `content_filter`.

The content is the client's, whichever credential the summarizer used: a request that does
not fit gets a 400 with the upstream's code (the SDK does not retry it) and none of the
upstream's text (Azure's lists what it flagged); the breaker every tenant shares does not
count it. A 400 the proxy cannot tell from its own mistake (any other code) is still the
summarizer's failure: a 503, counted.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.testing.replies import Reply
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import between_trigger_and_limit, over_the_limit, stages
from tests.test_compaction_failures import NO_CHEAP
from tests.test_summarizer_client_refusals import (MODELS, OWN_KEY, RefusingFake, _ask, _client,
                                                   another_thread_compacts, refusing)

__all__ = ["refusing"]  # the fixture, shared with the module that defines it

# One counted failure opens the breaker for the whole test: a cooldown of seconds ran out
# between two requests on a loaded machine, and the second was let try. Past the SDK's 120 s
# cap on `Retry-After`, its retries of a 503 back off briefly instead of waiting it out.
ONE_FAILURE_OPENS = {**NO_CHEAP, "breaker": {"failures": 1, "base_cooldown_s": 600}}

INVALID_PROMPT = {"error": {"message": "Invalid prompt: your prompt was flagged as potentially "
                                       "violating our usage policy. Please try again with a "
                                       "different prompt.",
                            "type": "invalid_request_error", "param": None,
                            "code": "invalid_prompt"}}
CONTENT_FILTER = {"error": {"message": "The response was filtered due to the prompt triggering "
                                       "the content management policy. Please modify your "
                                       "prompt and retry.",
                            "type": None, "param": "prompt", "code": "content_filter",
                            "status": 400,
                            "innererror": {"code": "ResponsibleAIPolicyViolation",
                                           "content_filter_result": {
                                               "violence": {"filtered": True,
                                                            "severity": "medium"}}}}}
# Not `max_tokens`'s refusal: that one buys a retry with the newer key (test_summarizer_output_key).
UNSUPPORTED = {"error": {"message": "Unsupported parameter: 'stop' is not supported with "
                                    "this model.", "type": "invalid_request_error",
                         "param": "stop", "code": "unsupported_parameter"}}




def _proxy(make_proxy, refusing: RefusingFake, own_key: bool):
    upstreams = {"upstreams": {"fake": {"api_key": OWN_KEY}}} if own_key else {}
    return make_proxy(refusing, models=MODELS, compaction=ONE_FAILURE_OPENS, **upstreams)


@pytest.mark.parametrize("own_key", [False, True], ids=["clients-key", "proxys-key"])
@pytest.mark.parametrize("body", [INVALID_PROMPT, CONTENT_FILTER], ids=["openai", "azure"])
def test_content_refused_by_policy_is_the_clients_400_not_counted(
        refusing: RefusingFake, make_proxy, body: Any, own_key: bool) -> None:
    refusing.refuse(OWN_KEY if own_key else API_KEY, 400, body, times=1)
    proxy = _proxy(make_proxy, refusing, own_key)
    with _client(proxy, API_KEY) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, over_the_limit(), "flagged")
    error = caught.value
    assert error.code == body["error"]["code"] and error.type == "invalid_request_error"
    assert "content policy" in error.message and "new thread" in error.message
    text = error.response.text
    assert "flagged as potentially" not in text and "filtered due to" not in text
    assert "violence" not in text and "innererror" not in text
    assert "retry-after" not in error.response.headers
    assert [line["status"] for line in proxy.requests()] == [400], "no retry in vain"
    assert refusing.refused == 1
    # Not counted: with `breaker.failures: 1` a counted failure would have opened it.
    another_thread_compacts(refusing, proxy, "another-thread")


def test_content_refused_on_a_request_that_fits_still_goes_up(refusing: RefusingFake,
                                                               make_proxy) -> None:
    refusing.refuse(API_KEY, 400, INVALID_PROMPT, times=1)
    proxy = _proxy(make_proxy, refusing, own_key=False)
    refusing.script(Reply.text("answered with the cheap stages"))
    with _client(proxy, API_KEY, retries=0) as client:
        answer = _ask(client, between_trigger_and_limit(), "fits")
    assert answer.parse().choices[0].message.content == "answered with the cheap stages"
    assert proxy.requests()[0]["compaction_degraded"] == "summarize"


def test_another_400_is_still_the_summarizers_failure(refusing: RefusingFake,
                                                      make_proxy) -> None:
    """The proxy's own request may be what the upstream refused: counted, a 503."""
    refusing.refuse(API_KEY, 400, UNSUPPORTED)
    proxy = _proxy(make_proxy, refusing, own_key=False)
    with _client(proxy, API_KEY, retries=0) as client:
        for n in range(2):
            with pytest.raises(openai.InternalServerError) as caught:
                _ask(client, over_the_limit(), f"unsupported-{n}")
            assert caught.value.status_code == 503
    assert stages(proxy) == ["summarize", "breaker_open"]
    assert refusing.refused == 1


def _flagged_compact() -> list[dict[str, Any]]:
    return [*over_the_limit(), {"role": "user", "content": "/compact"}]


def test_compact_of_refused_content_gets_the_same_400(refusing: RefusingFake,
                                                      make_proxy) -> None:
    refusing.refuse(API_KEY, 400, INVALID_PROMPT, times=1)
    proxy = _proxy(make_proxy, refusing, own_key=False)
    with _client(proxy, API_KEY) as client, pytest.raises(openai.BadRequestError) as caught:
        _ask(client, _flagged_compact(), "flagged-manual")
    assert caught.value.code == "invalid_prompt"
    assert "flagged as potentially" not in caught.value.response.text
    assert [line["status"] for line in proxy.requests()] == [400]
