"""What `/metrics` and the request line say about where the time and the tokens went."""

from __future__ import annotations

import socket
import time

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import metrics as library_metrics

from proxy.server.metrics import _LATENCY_BUCKETS, Metrics
from proxy.testing.replies import Reply
from proxy.testing.sessions import coding_session
from tests.compaction_session import LIMIT, MODEL
from tests.conftest import API_KEY

MODELS = {"small-*": {"max_input_tokens": LIMIT}}


def _saved_by_stage(metrics: str) -> dict[str, float]:
    saved = {}
    for line in metrics.splitlines():
        if line.startswith("proxy_tokens_saved_total{"):
            stage = line.split('stage="', 1)[1].split('"', 1)[0]
            saved[stage] = float(line.rsplit(" ", 1)[1])
    return saved


def test_the_cheap_stages_savings_are_counted_by_stage(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, models=MODELS)
    messages = coding_session(60, seed=3)
    for _ in range(2):
        fake.script(Reply.text("Noted."))
        answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                            json={"model": MODEL, "messages": messages},
                            headers={"x-thread-id": "savings", "authorization": f"Bearer {API_KEY}"})
        assert answer.status_code == 200, answer.text
    lines = proxy.requests()
    stages = lines[-1]["stages"]
    assert stages and all(s["tokens_saved"] > 0 for s in stages.values()), stages
    saved = _saved_by_stage(httpx.get(f"{proxy.url}/metrics").text)
    # Every projection sent counts what it left out.
    assert saved == {name: sum(line["stages"][name]["tokens_saved"] for line in lines)
                     for name in stages}


def test_upstream_latency_leaves_out_the_proxys_own_time(fake, proxy) -> None:
    fake.script(Reply.text("ok"))
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as client:
        client.sendall(head + body[:5])
        time.sleep(1.0)  # the proxy waits for the rest of the body: its time, not upstream's
        client.sendall(body[5:])
        while client.recv(65536):
            pass
    line = proxy.requests()[-1]
    # Bounds with room for a loaded machine: the handler may start a little after the head
    # came (on two busy cores it measured 493 ms of a 500 ms wait).
    assert line["status"] == 200 and line["duration_ms"] >= 800
    assert line["upstream_ms"] < line["duration_ms"] - 500, line


@pytest.mark.parametrize("created_series", [True, False])
def test_request_metrics_export_as_the_librarys_counter_and_histogram_would(
        monkeypatch, created_series: bool) -> None:
    """`proxy_requests_total` and `proxy_upstream_latency_seconds` are counted by hand (cheaper
    per request) and must read exactly as prometheus-client's own Counter and Histogram, with
    the library's `_created` series switched on or off."""
    monkeypatch.setattr(library_metrics, "_use_created", created_series)
    observed = [("chat", 200, 12.5), ("chat", 200, None), ("other", None, 0.0),
                ("responses", 404, 5.0), ("chat", 499, 300_000.0), ("chat", 200, 300_001.0)]
    _clock(monkeypatch)
    library = CollectorRegistry()
    requests = Counter("proxy_requests", "Requests handled, by route kind and status.",
                       ["kind", "status"], registry=library)
    latency = Histogram("proxy_upstream_latency_seconds", "Time to the upstream's response head.",
                        ["kind"], buckets=_LATENCY_BUCKETS, registry=library)
    for kind, status, upstream_ms in observed:
        requests.labels(kind, str(status or 0)).inc()
        if upstream_ms is not None:
            latency.labels(kind).observe(upstream_ms / 1000)
    expected = generate_latest(library).decode()

    metrics = Metrics()
    _clock(monkeypatch)  # the same `_created` times (the unlabelled counters took theirs)
    for kind, status, upstream_ms in observed:
        metrics.observe_request(kind, status, upstream_ms)
    exported = generate_latest(metrics.registry).decode()
    assert exported.startswith(expected), exported  # the other counters follow


def _clock(monkeypatch) -> None:
    ticks = iter(range(1_700_000_000, 1_800_000_000))
    monkeypatch.setattr(time, "time", lambda: float(next(ticks)))
