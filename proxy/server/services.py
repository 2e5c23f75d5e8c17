"""The long-lived services a handler needs, stored on the application under one typed key."""

from __future__ import annotations

from dataclasses import dataclass
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

    def route(self, model: str) -> UpstreamSettings:
        upstream = self.settings.route(model)
        if upstream is None:
            raise NotFound(f"No route for model {model!r}: add a matching entry to `routes` "
                           "in the proxy's config.", param="model", code="model_not_found")
        return upstream


SERVICES = web.AppKey("services", Services)
