"""Running the proxy and the fake upstream for tests, on a loop of their own.

Servers run on an event loop in a background thread, so the official `openai` client can be
used both ways: the sync client blocks only the test's thread, the async one runs on the test's
loop. Logs are captured as parsed JSON lines.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import pytest
from aiohttp import web

from proxy.__main__ import make_runner
from proxy.server.app import build_app
from proxy.server.logs import configure_logging
from proxy.records import ThreadKey, ThreadState
from proxy.server.pipeline import Pipeline
from proxy.server.services import SERVICES
from proxy.settings import LoggingSettings, Settings, parse_settings
from proxy.store.keys import thread_key_text

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class LogCapture(io.TextIOBase):
    """A text stream that keeps every JSON log line, parsed.

    The proxy answers a request before it writes that request's line (it records the answer's
    usage after sending it, in the same event-loop step). Reads from another thread therefore
    first let the servers' loop finish what it is doing: then every answer the test has seen
    has its line.
    """

    def __init__(self) -> None:
        self._lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None  # the servers' loop, once known

    @property
    def lines(self) -> list[dict[str, Any]]:
        self.settle()
        with self._lock:
            return list(self._lines)

    def settle(self) -> None:
        loop = self.loop
        if loop is None or not loop.is_running() or _running_loop() is loop:
            return
        for _ in range(2):  # a step that was under way, then anything it scheduled at once
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(10)

    def write(self, text: str) -> int:
        with self._lock:
            for line in text.splitlines():
                if line.strip():
                    self.raw.append(line)
                    self._lines.append(orjson.loads(line))
        return len(text)

    def events(self, name: str) -> list[dict[str, Any]]:
        self.settle()
        with self._lock:
            return [line for line in self._lines if line.get("event") == name]

    @property
    def text(self) -> str:
        self.settle()
        with self._lock:
            return "\n".join(self.raw)


@dataclass
class RunningProxy:
    settings: Settings
    app: web.Application
    runner: web.AppRunner
    port: int
    logs: LogCapture = field(default_factory=LogCapture)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def requests(self) -> list[dict[str, Any]]:
        return self.logs.events("request")


async def serve_every_path(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                           runners: list[web.AppRunner]) -> int:
    """A plain aiohttp server answering every path with `handler` (a test's own upstream); its
    runner joins `runners` for the test to clean up. Returns its port."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    runners.append(runner)
    return runner.addresses[0][1]


# The `tokens` section of a proxy whose tests are about estimates and anchors: every request
# counted and anchored, a plain small one too (which by default goes up uncounted:
# `proxy/server/untouched.py`).
COUNTED = {"count_every_request": True}


@pytest.fixture(name="proxy")
def counted_proxy(make_proxy: Callable[..., RunningProxy], fake: Any) -> RunningProxy:
    """`proxy` for a module of tests about estimates and anchors (imported there): the
    conftest's, with every request counted (`COUNTED`)."""
    return make_proxy(fake, tokens=COUNTED)


def loaded_state(loop_thread: Any, proxy: RunningProxy, thread: str) -> ThreadState:
    """The state of `thread` of the tenant of `proxy`'s last request, as its store has it."""
    tenant = proxy.requests()[-1]["tenant"]
    pipeline = proxy.app[SERVICES].pipeline
    return loop_thread.run(pipeline.store.load(ThreadKey(tenant, thread_key_text(thread))))


def proxy_settings(upstream_url: str, state_path: str, **sections: Any) -> Settings:
    """Settings for a test proxy: one upstream (the fake), state in a temporary directory."""
    raw: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_s": 2},
        "upstreams": {"fake": {"base_url": upstream_url, "timeout_s": 10, "connect_timeout_s": 2}},
        "state": {"path": state_path},
    }
    for name, value in sections.items():
        raw[name] = _merge(raw.get(name), value)
    return parse_settings(raw, {})


@asynccontextmanager
async def started_pipeline(state_path: str, **sections: Any) -> AsyncIterator[Pipeline]:
    """A pipeline in process, without a server: one upstream nobody listens on, state in
    `state_path`, `sections` as in the YAML."""
    raw: dict[str, Any] = {"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}},
                           "state": {"path": state_path}, **sections}
    pipeline = Pipeline(parse_settings(raw, {}))
    await pipeline.start()
    try:
        yield pipeline
    finally:
        await pipeline.stop()


def _merge(base: Any, extra: Any) -> Any:
    if isinstance(base, Mapping) and isinstance(extra, Mapping):
        merged = dict(base)
        for key, value in extra.items():
            merged[key] = _merge(base.get(key), value)
        return merged
    return extra


async def start_proxy(settings: Settings, logs: LogCapture | None = None) -> RunningProxy:
    logs = logs or LogCapture()
    logs.loop = asyncio.get_running_loop()
    configure_logging(LoggingSettings(format="json", level="debug"), stream=logs)
    app = build_app(settings)
    runner = make_runner(app)
    await runner.setup()
    site = web.TCPSite(runner, settings.server.host, settings.server.port)
    await site.start()
    port = runner.addresses[0][1]
    return RunningProxy(settings, app, runner, port, logs)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def stop_proxy(proxy: RunningProxy) -> None:
    await proxy.runner.cleanup()
