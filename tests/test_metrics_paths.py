"""`GET /metrics` on every way a request can go: each request counts once, with its route kind
and the status the client got; the latency histogram moves only when an upstream answered; no
label carries what a client chose (a model, a thread, a tenant, an id in a path); the
exposition parses with prometheus-client's own parser."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session
from tests.conftest import API_KEY
from tests.test_compaction_failures import MODELS, NO_CHEAP, _post, _prefix

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "thread-SECRETISH-42"}


def _samples(proxy) -> Samples:
    text = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if not s.name.endswith("_created")}


def _moved(before: Samples, after: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value - before.get((n, labels), 0.0) for (n, labels), value in after.items()
            if n == name and value != before.get((n, labels), 0.0)}


def _kind_status(kind: str, status: int) -> tuple[tuple[str, str], ...]:
    return (("kind", kind), ("status", str(status)))


def _lines(proxy, count: int) -> list[dict[str, Any]]:
    """The request lines, once `count` are written: a client that left is seen by the proxy
    a moment after the client closed."""
    deadline = time.monotonic() + 10
    while len(proxy.requests()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return proxy.requests()


def _left_mid_stream(proxy) -> int:
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", headers=HEADERS,
                      json={**CHAT, "stream": True}, timeout=10) as answer:
        next(answer.iter_bytes())
        return answer.status_code


_PATHS: list[tuple[str, Any, Any, str, int, bool]] = [
    # name, scripted reply, request, kind, status the line and the metric say, upstream answered
    ("plain", Reply.text("ok"),
     lambda p: httpx.post(f"{p.base_url}/chat/completions", json=CHAT, headers=HEADERS),
     "chat", 200, True),
    ("streamed", Reply.text("ok"),
     lambda p: httpx.post(f"{p.base_url}/chat/completions", json={**CHAT, "stream": True},
                          headers=HEADERS), "chat", 200, True),
    ("pass-through with an id", None,
     lambda p: httpx.get(f"{p.base_url}/files/file-abc123", headers=HEADERS),
     "passthrough", 404, True),
    ("responses with an id", None,
     lambda p: httpx.get(f"{p.base_url}/responses/resp_123", headers=HEADERS),
     "passthrough", 404, True),
    ("malformed json", None,
     lambda p: httpx.post(f"{p.base_url}/chat/completions", content=b"{nope", headers=HEADERS),
     "chat", 400, False),
    ("upstream error relayed", Reply.error(429, {"error": {"message": "slow", "type": "x"}}),
     lambda p: httpx.post(f"{p.base_url}/chat/completions", json=CHAT, headers=HEADERS),
     "chat", 429, True),
    ("client left mid-stream", Reply.hang(after=2), _left_mid_stream, "chat", 499, True),
]


@pytest.mark.parametrize("name, reply, send, kind, status, answered", _PATHS,
                         ids=[p[0] for p in _PATHS])
def test_each_request_counts_once_with_its_kind_and_status(
        fake, proxy, name: str, reply: Reply | None, send: Any, kind: str, status: int,
        answered: bool) -> None:
    if reply is not None:
        fake.script(reply)
    before = _samples(proxy)
    send(proxy)
    [line] = _lines(proxy, 1)
    assert line["status"] == status, line
    after = _samples(proxy)
    assert _moved(before, after, "proxy_requests_total") == {_kind_status(kind, status): 1.0}
    counted = _moved(before, after, "proxy_upstream_latency_seconds_count")
    assert counted == ({(("kind", kind),): 1.0} if answered else {})
    assert ("upstream_ms" in line) is answered


def test_an_unreachable_upstream_counts_its_502_and_no_latency(make_proxy) -> None:
    proxy = make_proxy("http://127.0.0.1:9/v1")
    httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT, headers=HEADERS, timeout=10)
    httpx.get(f"{proxy.base_url}/models", headers=HEADERS, timeout=10)
    after = _samples(proxy)
    assert _moved({}, after, "proxy_requests_total") == {_kind_status("chat", 502): 1.0,
                                                         _kind_status("passthrough", 502): 1.0}
    assert not _moved({}, after, "proxy_upstream_latency_seconds_count")


def test_no_label_carries_what_the_client_chose(fake, proxy) -> None:
    """A client can send any string as `model`: 300 distinct ones (and ids in paths, thread
    ids, tenants) add no series."""
    fake.script(Reply.text("ok"))
    httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT, headers=HEADERS, timeout=10)
    series = set(_samples(proxy))
    with httpx.Client(timeout=10) as client:
        for n in range(300):
            fake.script(Reply.text("ok"))
            body = {**CHAT, "model": f"client-model-{n}-\u00e9\"\\"}
            answer = client.post(f"{proxy.base_url}/chat/completions", json=body,
                                 headers={**HEADERS, "x-thread-id": f"t-{n}",
                                          "authorization": f"Bearer sk-tenant-{n}"})
            assert answer.status_code == 200
    after = _samples(proxy)
    assert set(after) == series
    assert after[("proxy_requests_total", _kind_status("chat", 200))] == 301
    labels = {value for (_, pairs) in after for _, value in pairs}
    assert not [v for v in labels if "model" in v or "t-" in v or "SECRETISH" in v]


def test_compaction_outcomes_count_once_per_compaction(make_fake, make_proxy) -> None:
    """A degraded request counts its failed summary; the breaker's refusal counts as
    `failed_breaker_open`, never as another failed summary; a completed summary counts once,
    with the tokens it saved."""
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=2)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 2, "base_cooldown_s": 60}})
    messages, _ = planted_session(200)
    between = _prefix(messages, 12_600, 14_500)  # over the trigger, under the limit
    outcomes = []
    for _ in range(3):
        before = _samples(proxy)
        fake.script(Reply.text("ok"))
        assert _post(proxy, between, "deg").status_code == 200
        after = _samples(proxy)
        outcomes.append(_moved(before, after, "proxy_compactions_total"))
        assert _moved(before, after, "proxy_requests_total") == {_kind_status("chat", 200): 1.0}
    failed = {(("outcome", "failed_summarize"), ("strategy", "partial")): 1.0}
    refused = {(("outcome", "failed_breaker_open"), ("strategy", "partial")): 1.0}
    assert outcomes == [failed, failed, refused]
    assert [line["compaction_degraded"] for line in proxy.requests()] == [
        "summarize", "summarize", "breaker_open"]

    fresh = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    summarizer.fail = 0
    fake.script(Reply.text("ok"))
    before = _samples(fresh)
    assert _post(fresh, between, "ok").headers["x-compaction"] == "compacted"
    after = _samples(fresh)
    assert _moved(before, after, "proxy_compactions_total") == {
        (("outcome", "completed"), ("strategy", "partial")): 1.0}
    [completed] = fresh.logs.events("compaction_completed")
    saved = _moved(before, after, "proxy_tokens_saved_total")
    assert saved == {(("stage", "llm"),): completed["tokens_before"] - completed["tokens_after"]}


@pytest.mark.parametrize("reply", [Reply.die(after=2), Reply.stream_error(after=1)],
                         ids=["cut off", "error frame"])
def test_a_stream_the_upstream_broke_is_counted_though_its_status_was_200(
        fake, proxy, reply: Reply) -> None:
    """The client got 200 before the upstream failed: only `upstream_error` on the line, and
    this counter, say the answer is not whole."""
    fake.script(Reply.text("ok"), reply)
    for _ in range(2):
        httpx.post(f"{proxy.base_url}/chat/completions", json={**CHAT, "stream": True},
                   headers=HEADERS, timeout=10)
    lines = _lines(proxy, 2)
    assert [line["status"] for line in lines] == [200, 200]
    assert "upstream_error" not in lines[0] and lines[1]["upstream_error"]
    after = _samples(proxy)
    assert _moved({}, after, "proxy_upstream_stream_errors_total") == {(("kind", "chat"),): 1.0}
