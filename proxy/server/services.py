"""The long-lived services a handler needs, stored on the application under one typed key.

What follows from the config file (`Configured`: the settings, the pipeline built on them, the
routes, the origins) is one object, which a reload (`proxy/server/reload.py`) replaces whole.
A request takes it once, when it starts, and keeps it to its end: it never sees some settings
of one version of the file and some of another.
"""

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


@dataclass(frozen=True)
class Configured:
    settings: Settings
    pipeline: Any  # proxy.server.pipeline.Pipeline
    origins: Origins | None = None  # when the routes name several upstreams
    # The memory of an earlier version's `origins` while the routes name one upstream: unused,
    # carried so that a reload back to several upstreams still knows which made each id.
    idle_origins: Origins | None = field(default=None, repr=False, compare=False)

    # The upstream of the models asked for (the same few on every request): a route is one
    # dict lookup, not a glob match per configured route.
    _routes: Memo[str, UpstreamSettings] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_routes", Memo(self._route, max_entries=1024, max_chars=256))

    @property
    def remembered(self) -> Origins | None:
        """The origins memory a reload carries to the next version: in use or idle."""
        return self.origins if self.origins is not None else self.idle_origins

    def route(self, model: str) -> UpstreamSettings:
        return self._routes[model]

    def _route(self, model: str) -> UpstreamSettings:
        upstream = self.settings.route(model)
        if upstream is None:
            raise NotFound(f"No route for model {model!r}: add a matching entry to `routes` "
                           "in the proxy's config.", param="model", code="model_not_found")
        return upstream


@dataclass
class Services:
    configured: Configured  # the config in force: replaced whole by a reload
    upstream: UpstreamClient  # one client for every upstream, whatever the config's version
    log: Any
    drain: Drain
    metrics: Any = None  # proxy.server.metrics.Metrics

    # The config in force's parts, for what runs outside a request (and for tests). A handler
    # reads `configured` once instead: these may change between two reads. Read-only: a change
    # is a new `Configured`, put in force whole.
    @property
    def settings(self) -> Settings:
        return self.configured.settings

    @property
    def pipeline(self) -> Any:
        return self.configured.pipeline

    @property
    def origins(self) -> Origins | None:
        return self.configured.origins


SERVICES = web.AppKey("services", Services)
