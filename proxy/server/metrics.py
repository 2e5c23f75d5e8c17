"""Prometheus metrics (`GET /metrics`): what an operator graphs and alerts on.

One registry per application, so several proxies in one process (tests) never share counters.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from typing import Any

from aiohttp import web
from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge,
                               generate_latest)
from prometheus_client import metrics as library_metrics
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                    Metric)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from proxy.store.failures import FailureHooks

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Every request counts itself and its upstream latency: kept here as plain numbers,
        # exported by `RequestExport` when scraped (see there why).
        self._request_counts: dict[tuple[str, int], _Count] = {}
        self._latencies: dict[str, _Latencies] = {}
        self.registry.register(RequestExport(self._request_counts, self._latencies))
        self.compactions = Counter(
            "proxy_compactions", "LLM compactions, by strategy and outcome: `completed`, or "
            "`failed_` and the stage of their `compaction_failed` event (`breaker_open`, "
            "`hysteresis`: refused before any summary), once per compaction.",
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
        self.degraded = Counter(
            "proxy_compaction_degraded", "Requests over the trigger forwarded with the cheap "
            "stages only, because their LLM compaction failed or was not tried (the line's "
            "`compaction_degraded`), by stage.", ["stage"], registry=self.registry)
        self.state_write_failures = Counter(
            "proxy_state_write_failures", "State writes that did not reach state.db (a full "
            "disk, a read-only file): queued anchor and activity writes lost "
            "(`state_write_failed`), and refused checkpoint and microcompact-mark writes.",
            registry=self.registry)
        self.state_damaged = Counter(
            "proxy_state_damaged", "Statements that met a damaged page or an undecodable row "
            "of state.db (`state_damaged`): each fails its request with a 500 state_damaged, "
            "or loses the writes it carried.", registry=self.registry)
        self.config_reloads = Counter(
            "proxy_config_reloads", "Config reloads (SIGHUP), by outcome: `applied`, `partial` "
            "(applied but for keys that need a restart: `config_reload_partial`), `unchanged`, "
            "`failed` (an invalid file, the running config kept: `config_reload_failed`).",
            ["outcome"], registry=self.registry)
        self.config_loaded_at = Gauge(
            "proxy_config_loaded_timestamp_seconds", "When the config in force was read: at "
            "start, or by the last reload that changed it.", registry=self.registry)
        self.config_info = Gauge(
            "proxy_config_info", "The config in force by its digest (`config_digest` of the "
            "`listening` and `config_reloaded` lines): one series, 1.", ["digest"],
            registry=self.registry)
        self._breakers: BreakerExport | None = None

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

    def observe_compaction_failed(self, strategy: str, stage: str) -> None:
        self.compactions.labels(strategy, f"failed_{stage}").inc()

    def observe_degraded(self, stage: str) -> None:
        self.degraded.labels(stage).inc()

    def store_hooks(self) -> FailureHooks:
        """What the state store calls on its failures (prometheus-client's counters lock:
        the store's worker thread may call them)."""
        return FailureHooks(writes_lost=self.state_write_failures.inc,
                            damaged=self.state_damaged.inc)

    def watch_breakers(self, not_closed: Callable[[], Tally[tuple[str, str]]],
                       upstreams: Iterable[str]) -> None:
        """Export the summarizers' breakers that are not closed, counted when scraped."""
        self._breakers = BreakerExport(not_closed, tuple(upstreams))
        self.registry.register(self._breakers)

    def config_loaded(self, digest: str, upstreams: Iterable[str] | None = None) -> None:
        """A config came into force (at start, or by a reload): `upstreams`, its upstreams'
        names when they may have changed, for the breakers' series."""
        self.config_loaded_at.set_to_current_time()
        self.config_info.clear()
        self.config_info.labels(digest).set(1)
        if upstreams is not None and self._breakers is not None:
            self._breakers.upstreams = tuple(upstreams)

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


class BreakerExport:
    """`proxy_summarizer_breakers{upstream,state}`: how many summarizer breakers are open or
    half-open, read from the breakers at scrape time, so the request path pays nothing. Every
    configured upstream has both series, 0 included, so an alert needs no `absent()`; the
    model is not a label (the client names it: unbounded)."""

    _STATES = ("open", "half_open")

    def __init__(self, not_closed: Callable[[], Tally[tuple[str, str]]],
                 upstreams: tuple[str, ...]) -> None:
        self._not_closed = not_closed
        self.upstreams = upstreams  # the config's in force (a reload sets them)

    def collect(self) -> Iterator[Metric]:
        counts = self._not_closed()
        gauge = GaugeMetricFamily(
            "proxy_summarizer_breakers", "Summarizer circuit breakers not closed, by the "
            "summarizer's upstream: `open` (no summary is tried: requests over the trigger go "
            "on with the cheap stages only, or get a 503) or `half_open` (the cooldown is "
            "over: the next summary is the trial).", labels=("upstream", "state"))
        upstreams = dict.fromkeys(self.upstreams)
        upstreams.update(dict.fromkeys(upstream for upstream, _ in counts))
        for upstream in upstreams:
            for state in self._STATES:
                gauge.add_metric((upstream, state), counts.get((upstream, state), 0))
        yield gauge
