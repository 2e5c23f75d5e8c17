"""Shared fixtures: a background loop, the fake upstream, a proxy in front of it, real clients."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import openai
import pytest
from hypothesis import HealthCheck, settings

from tests.harness import LoopThread, RunningProxy, proxy_settings, start_proxy, stop_proxy
# The real Redis server's fixtures, for the Redis state backend's tests.
from tests.redis_server import redis_prefix, redis_server, redis_url  # noqa: F401

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("deep", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream
    from tests.edge_checks import ScriptedUpstream

API_KEY = "sk-test-0123456789abcdef"


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture
def make_fake(loop_thread: LoopThread) -> Iterator[Callable[..., FakeUpstream]]:
    started: list[FakeUpstream] = []

    from proxy.testing.fake_upstream import FakeUpstream

    def make(**options: Any) -> FakeUpstream:
        fake = FakeUpstream(**options)
        loop_thread.run(fake.start())
        started.append(fake)
        return fake

    yield make
    for fake in started:
        loop_thread.run(fake.stop())


@pytest.fixture
def fake(make_fake: Callable[..., FakeUpstream]) -> FakeUpstream:
    return make_fake()


@pytest.fixture
def make_proxy(loop_thread: LoopThread, tmp_path: Any) -> Iterator[Callable[..., RunningProxy]]:
    started: list[RunningProxy] = []

    def make(upstream: FakeUpstream | str, **sections: Any) -> RunningProxy:
        url = upstream if isinstance(upstream, str) else upstream.url
        state = sections.pop("state_path", str(tmp_path / f"state{len(started)}"))
        proxy = loop_thread.run(start_proxy(proxy_settings(url, state, **sections)))
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        loop_thread.run(stop_proxy(proxy))


@pytest.fixture
def proxy(make_proxy: Callable[..., RunningProxy], fake: FakeUpstream) -> RunningProxy:
    return make_proxy(fake)


@pytest.fixture
def client(proxy: RunningProxy) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    yield client
    client.close()


@pytest.fixture
async def aclient(proxy: RunningProxy) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    yield client
    await client.close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., openai.OpenAI]]:
    """Sync clients for a given base URL, closed after the test."""
    made: list[openai.OpenAI] = []

    def make(base_url: str, api_key: str = API_KEY) -> openai.OpenAI:
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def scripted(loop_thread: LoopThread, make_proxy) -> Iterator[tuple[Any, ScriptedUpstream]]:
    """A proxy in front of an upstream that answers what each test scripts."""
    from tests.edge_checks import ScriptedUpstream
    upstream = ScriptedUpstream()
    loop_thread.run(upstream.start())
    yield make_proxy(upstream.url), upstream
    loop_thread.run(upstream.stop())
