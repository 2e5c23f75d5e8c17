"""Prometheus metrics (`GET /metrics`): what an operator graphs and alerts on.

One registry per application, so several proxies in one process (tests) never share counters.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("proxy_requests", "Requests handled, by route kind and status.",
                                ["kind", "status"], registry=self.registry)
        self.upstream_latency = Histogram("proxy_upstream_latency_seconds",
                                          "Time to the upstream's response head.", ["kind"],
                                          buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.compactions = Counter("proxy_compactions",
                                   "LLM compactions, by strategy and outcome.",
                                   ["strategy", "outcome"], registry=self.registry)
        self.tokens_saved = Counter(
            "proxy_tokens_saved", "Estimated prompt tokens removed from the projections sent "
            "upstream, by stage: a cheap stage counts on every request it shortened, `llm` "
            "once per summary (tokens before minus after).", ["stage"], registry=self.registry)
        self.retries = Counter("proxy_upstream_retries",
                               "Requests retried once after an upstream rejection, by reason.",
                               ["reason"], registry=self.registry)

        # Labelled children, looked up once: `labels()` validates and locks on every call.
        self._request_counts: dict[tuple[str, int], Any] = {}
        self._latencies: dict[str, Any] = {}
        self._stages: dict[str, Any] = {}

    def observe_request(self, kind: str, status: int | None, upstream_ms: float | None) -> None:
        counter = self._request_counts.get((kind, status or 0))
        if counter is None:
            counter = self._request_counts[(kind, status or 0)] = self.requests.labels(
                kind, str(status or 0))
        counter.inc()
        if upstream_ms is not None:
            latency = self._latencies.get(kind)
            if latency is None:
                latency = self._latencies[kind] = self.upstream_latency.labels(kind)
            latency.observe(upstream_ms / 1000)

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
