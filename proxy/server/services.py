"""The long-lived services a handler needs, stored on the application under one typed key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from proxy.errors import NotFound
from proxy.server.drain import Drain
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

    # The upstream of the first models asked for (the same few on every request): a route is
    # one dict lookup, not a glob match per configured route. Short names only, at most 1024.
    _routes: dict[str, UpstreamSettings] = field(default_factory=dict, init=False, repr=False)

    def route(self, model: str) -> UpstreamSettings:
        upstream = self._routes.get(model)
        if upstream is None:
            upstream = self.settings.route(model)
            if upstream is None:
                raise NotFound(f"No route for model {model!r}: add a matching entry to "
                               "`routes` in the proxy's config.", param="model",
                               code="model_not_found")
            if len(model) <= _ROUTE_MEMO_NAME and len(self._routes) < _ROUTE_MEMO_SIZE:
                self._routes[model] = upstream
        return upstream


_ROUTE_MEMO_NAME = 256
_ROUTE_MEMO_SIZE = 1024


SERVICES = web.AppKey("services", Services)
