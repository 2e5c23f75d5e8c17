"""The long-lived services a handler needs, stored on the application under one typed key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from proxy.errors import NotFound
from proxy.lru import Memo
from proxy.server.drain import Drain
from proxy.server.origins import Origins
from proxy.settings import Settings, UpstreamSettings
from proxy.server.upstream import UpstreamClient


@dataclass
class Services:
    settings: Settings
    upstream: UpstreamClient
    log: Any
    drain: Drain
    pipeline: Any = None  # proxy.server.pipeline.Pipeline, set at start
    metrics: Any = None  # proxy.server.metrics.Metrics
    origins: Origins | None = None  # when the routes name several upstreams

    # The upstream of the models asked for (the same few on every request): a route is one
    # dict lookup, not a glob match per configured route.
    _routes: Memo[str, UpstreamSettings] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._routes = Memo(self._route, max_entries=1024, max_chars=256)

    def route(self, model: str) -> UpstreamSettings:
        return self._routes[model]

    def _route(self, model: str) -> UpstreamSettings:
        upstream = self.settings.route(model)
        if upstream is None:
            raise NotFound(f"No route for model {model!r}: add a matching entry to `routes` "
                           "in the proxy's config.", param="model", code="model_not_found")
        return upstream


SERVICES = web.AppKey("services", Services)
