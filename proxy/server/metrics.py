"""Prometheus metrics (`GET /metrics`): what an operator graphs and alerts on.

One registry per application, so several proxies in one process (tests) never share counters.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client import metrics as library_metrics
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Every request counts itself and its upstream latency: kept here as plain numbers,
        # exported by `RequestExport` when scraped (see there why).
        self._request_counts: dict[tuple[str, int], _Count] = {}
        self._latencies: dict[str, _Latencies] = {}
        self.registry.register(RequestExport(self._request_counts, self._latencies))
        self.compactions = Counter("proxy_compactions",
                                   "LLM compactions, by strategy and outcome.",
                                   ["strategy", "outcome"], registry=self.registry)
        self.tokens_saved = Counter(
            "proxy_tokens_saved", "Estimated prompt tokens removed from the projections sent "
            "upstream, by stage: a cheap stage counts on every request it shortened, `llm` "
            "once per summary (tokens before minus after).", ["stage"], registry=self.registry)
        self.stream_errors = Counter(
            "proxy_upstream_stream_errors", "Answers that went out with their status (a 200 in "
            "proxy_requests_total) but not whole: the upstream broke the stream off or ended it "
            "in an error frame, or the shutdown cut it (`upstream_error` on the line).",
            ["kind"], registry=self.registry)
        self.retries = Counter("proxy_upstream_retries",
                               "Requests retried once after an upstream rejection, by reason.",
                               ["reason"], registry=self.registry)

        # Labelled children, looked up once: `labels()` validates and locks on every call.
        self._stages: dict[str, Any] = {}
        self._stream_errors: dict[str, Any] = {}

    def observe_request(self, kind: str, status: int | None, upstream_ms: float | None) -> None:
        count = self._request_counts.get((kind, status or 0))
        if count is None:
            count = self._request_counts[(kind, status or 0)] = _Count()
        count.value += 1
        if upstream_ms is not None:
            latencies = self._latencies.get(kind)
            if latencies is None:
                latencies = self._latencies[kind] = _Latencies()
            seconds = upstream_ms / 1000
            # The first bucket whose bound is >= seconds (a bound is an inclusive upper limit).
            latencies.buckets[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
            latencies.sum += seconds

    def observe_stream_error(self, kind: str) -> None:
        counter = self._stream_errors.get(kind)
        if counter is None:
            counter = self._stream_errors[kind] = self.stream_errors.labels(kind)
        counter.inc()

    def observe_saved(self, stage: str, tokens: int) -> None:
        if tokens <= 0:
            return
        counter = self._stages.get(stage)
        if counter is None:
            counter = self._stages[stage] = self.tokens_saved.labels(stage)
        counter.inc(tokens)

    async def handler(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


class _Count:
    def __init__(self) -> None:
        self.created = time.time()
        self.value = 0.0


class _Latencies:
    def __init__(self) -> None:
        self.created = time.time()
        self.buckets = [0.0] * (len(_LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0


class RequestExport:
    """`proxy_requests_total{kind,status}` and `proxy_upstream_latency_seconds{kind}`, from the
    numbers `Metrics.observe_request` keeps, in the families prometheus-client's own Counter and
    Histogram would export. Those objects cost every request ~200 Python steps (label checks,
    a lock per value, a linear bucket search), about 2% of the proxy's work on a small request."""

    def __init__(self, counts: dict[tuple[str, int], _Count],
                 latencies: dict[str, _Latencies]) -> None:
        self._counts = counts
        self._latencies = latencies

    def collect(self) -> Iterator[Metric]:
        # The library's switch for `_created` series (PROMETHEUS_DISABLE_CREATED_SERIES,
        # `disable_created_metrics()`), which its own metrics in this registry follow too.
        created = getattr(library_metrics, "_use_created", True)
        requests = CounterMetricFamily("proxy_requests",
                                       "Requests handled, by route kind and status.",
                                       labels=("kind", "status"))
        for (kind, status), count in list(self._counts.items()):
            requests.add_metric((kind, str(status)), count.value,
                                created=count.created if created else None)
        yield requests
        name = "proxy_upstream_latency_seconds"
        latency = HistogramMetricFamily(name, "Time to the upstream's response head.",
                                        labels=("kind",))
        for kind, latencies in list(self._latencies.items()):
            latency.add_metric((kind,), list(zip(_BOUND_LABELS, accumulate(latencies.buckets))),
                               latencies.sum)
            if created:
                latency.samples.append(Sample(name + "_created", {"kind": kind},
                                              latencies.created))
        yield latency


_BOUND_LABELS = tuple(floatToGoString(b) for b in (*_LATENCY_BUCKETS, float("inf")))
