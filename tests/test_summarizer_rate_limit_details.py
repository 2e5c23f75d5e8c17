"""What a client rate-limited on its own credential by the summarizer's upstream learns of the
limit: OpenAI's `x-ratelimit-*` headers, passed on when well-formed (no other upstream header),
and, for a request that waited for the compaction another request of its thread ran, what is
left of the upstream's wait rather than the whole of it (never below a second; an HTTP-date
`Retry-After` is absolute and passes as it came).
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.server import client_owned
from proxy.server.client_owned import Refusal, refusal_error
from tests.conftest import API_KEY
from tests.test_compaction_failure_paths import over_the_limit
from tests.test_compaction_failures import NO_CHEAP
from tests.test_summarizer_client_refusals import (MODELS, RATE_LIMITED, RefusingFake, _ask,
                                                   _client, queued_behind, refusing)

__all__ = ["refusing"]  # the fixture, shared with the module that defines it

LIMITS = {"x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999",
          "x-ratelimit-reset-requests": "6m0s", "x-ratelimit-limit-tokens": "30000",
          "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1.5s"}


def test_the_upstreams_rate_limit_headers_are_passed_on_and_nothing_else(
        refusing: RefusingFake, make_proxy) -> None:
    refusing.refuse(API_KEY, 429, RATE_LIMITED, {
        "Retry-After": "17", **LIMITS, "openai-organization": "org-private",
        "x-request-id": "req_upstream", "set-cookie": "__cf_bm=upstream"}, times=1)
    proxy = make_proxy(refusing, models=MODELS, compaction=NO_CHEAP)
    with _client(proxy, API_KEY, retries=0) as client, \
            pytest.raises(openai.RateLimitError) as caught:
        _ask(client, over_the_limit(), "limits")
    headers = caught.value.response.headers
    assert {name: headers.get(name) for name in LIMITS} == LIMITS
    assert "openai-organization" not in headers and "set-cookie" not in headers
    assert headers.get("x-request-id") != "req_upstream"


@pytest.mark.parametrize("value", ["soon", "-1", "1.5 s", "6m0", "12345678901234", "1e3",
                                   "20ms; drop table"])
def test_a_rate_limit_header_passes_only_when_it_reads_as_a_count_or_duration(value: str) -> None:
    read = client_owned.read_refusal(429, b"{}", {"x-ratelimit-reset-tokens": value,
                                                  "x-ratelimit-reset-requests": "20ms",
                                                  "x-ratelimit-remaining-tokens": "0"})
    assert read.limits == {"x-ratelimit-reset-requests": "20ms",
                           "x-ratelimit-remaining-tokens": "0"}


def _clock(monkeypatch: pytest.MonkeyPatch, *ticks: float) -> None:
    """`client_owned`'s clock reads `ticks` in turn, then stays at the last."""
    left = list(ticks)
    monkeypatch.setattr(client_owned, "clock", lambda: left.pop(0) if len(left) > 1 else left[0])


@pytest.mark.parametrize(("waits", "left"), [
    ({"Retry-After": "17", "retry-after-ms": "16500"},
     {"Retry-After": "7", "retry-after-ms": "6500"}),
    ({"Retry-After": "5", "retry-after-ms": "4200"},
     {"Retry-After": "1", "retry-after-ms": "1000"}),
    ({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"},
     {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"})])
def test_a_request_that_waited_gets_what_is_left_of_the_wait(
        loop_thread, make_proxy, monkeypatch: pytest.MonkeyPatch, waits: dict[str, str],
        left: dict[str, str]) -> None:
    """The refusal is read at 100 s; the request that waited is answered at 110 s."""
    _clock(monkeypatch, 100.0, 110.0)
    answers, fake, _ = queued_behind(loop_thread, make_proxy, waits)
    assert [a.status_code for a in answers] == [429, 429]
    assert fake.refused == 1
    assert _waits(answers[0].headers) == waits, "the request that was refused: as it came"
    assert _waits(answers[1].headers) == left


def _waits(headers: Any) -> dict[str, str]:
    return {name: headers[name] for name in ("Retry-After", "retry-after-ms") if name in headers}


def test_the_wait_left_is_counted_from_when_the_refusal_was_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = Refusal(429, retry_after={"Retry-After": "30", "retry-after-ms": "29500"},
                      read_at=50.0)
    _clock(monkeypatch, 62.4)
    assert refusal_error(refusal).headers["Retry-After"] == "30"
    waited = refusal_error(refusal, waited=True).headers
    assert (waited["Retry-After"], waited["retry-after-ms"]) == ("18", "17100")


@pytest.mark.parametrize(("millis", "seconds"), [("1500", "2"), ("200", "1"), ("3000", "3")])
def test_a_wait_in_milliseconds_alone_gives_its_seconds_too(millis: str, seconds: str) -> None:
    """`Retry-After` was the default second beside `retry-after-ms: 1500`: a client that reads
    only `Retry-After` came back early, and paid for another summary attempt."""
    refusal = Refusal(429, retry_after={"retry-after-ms": millis}, read_at=client_owned.clock())
    headers = refusal_error(refusal).headers
    assert (headers["Retry-After"], headers["retry-after-ms"]) == (seconds, millis)
