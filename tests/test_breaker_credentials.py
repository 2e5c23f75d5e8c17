"""The summarizer's breaker and whose credential its upstream refused (SPEC §9).

A summarizer upstream without its own `api_key` is called with the client's credential: a
revoked key of one tenant is refused there (401) whatever the summarizer's health, and must not
open the breaker every tenant shares. The proxy's own key refused is the summarizer's failure,
for everyone: the breaker counts it.
"""

from __future__ import annotations

import httpx
import orjson

from proxy.testing.fake_upstream import FakeUpstream, Recorded
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import over_the_limit, stages
from tests.test_compaction_failures import NO_CHEAP

MODELS = {"small-*": {"max_input_tokens": LIMIT}}
REVOKED = "sk-revoked"


def _refusing(fake: FakeUpstream, key: str) -> FakeSummarizer:
    """A summarizer that answers 401 to summary requests authorized with `key`."""
    summarizer = FakeSummarizer.install(fake)
    answer = fake.responder

    def respond(recorded: Recorded) -> Reply | None:
        if (is_summarizer_request(recorded.json)
                and recorded.headers.get("authorization") == f"Bearer {key}"):
            return Reply.error(401, {"error": {"message": "Incorrect API key provided",
                                               "type": "invalid_request_error", "param": None,
                                               "code": "invalid_api_key"}})
        return answer(recorded) if answer is not None else None

    fake.responder = respond
    return summarizer


def _post(proxy, thread: str, key: str) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                      content=orjson.dumps({"model": MODEL, "messages": over_the_limit()}),
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               "authorization": f"Bearer {key}"})


def test_a_tenants_refused_key_does_not_open_the_breaker_for_the_others(make_fake,
                                                                        make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    _refusing(fake, REVOKED)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    for n in range(3):  # the breaker's default failures
        refused = _post(proxy, f"revoked-{n}", REVOKED)
        assert refused.status_code == 401, refused.text  # the client's, not a 503
        assert "HTTP 401" in refused.json()["error"]["message"]
    fake.script(Reply.text("compacted for the other tenant"))
    other = _post(proxy, "another-tenant", API_KEY)
    assert other.status_code == 200, other.text
    assert other.headers["x-compaction"] == "compacted"
    assert stages(proxy) == ["summarize"] * 3


def test_the_proxys_own_summarizer_key_refused_opens_the_breaker(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = _refusing(fake, REVOKED)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP,
                       upstreams={"fake": {"api_key": REVOKED}})
    answers = [_post(proxy, f"own-key-{n}", API_KEY) for n in range(4)]
    assert [a.status_code for a in answers] == [503] * 4
    assert [a.headers["retry-after"] for a in answers[:2]] == ["1", "1"]
    assert int(answers[3].headers["retry-after"]) > 1
    assert stages(proxy) == ["summarize"] * 3 + ["breaker_open"]
    assert summarizer.calls == 0  # every one was refused before the fake summarizer answered
