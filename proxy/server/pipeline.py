"""The request pipeline: from the client's request to the projection sent upstream, and back.

`prepare` turns an inbound request into the body to forward (or into an answer of the proxy's
own); `finish_body` / `finish_stream` read what the upstream answered. Stages plug in here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from proxy.inbound import Inbound
from proxy.outbound import build_body
from proxy.server.relay import PlainTap, StreamTap
from proxy.server.request_line import RequestLine
from proxy.settings import Settings, UpstreamSettings
from proxy.threads import ThreadIdentity


@dataclass
class Prepared:
    inbound: Inbound
    identity: ThreadIdentity
    upstream: UpstreamSettings
    body: bytes
    answer: web.StreamResponse | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    stream_tap: Callable[[], StreamTap] = PlainTap
    facts: dict[str, Any] = field(default_factory=dict)


class Pipeline:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def prepare(self, inbound: Inbound, identity: ThreadIdentity,
                      upstream: UpstreamSettings, line: RequestLine) -> Prepared:
        body = build_body(inbound, inbound.entries, include_usage=False)
        return Prepared(inbound, identity, upstream, body)

    async def finish_body(self, prepared: Prepared, data: bytes, status: int,
                          line: RequestLine) -> None:
        return None

    async def finish_stream(self, prepared: Prepared, tap: StreamTap, status: int,
                            line: RequestLine) -> None:
        return None
