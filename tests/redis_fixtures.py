"""Fixtures over the tests' Redis server (`tests/redis_server.py`): a raw client, an opened
store, two stores as two instances, an opened history; each under the test's own key prefix
and closed after it. A test file takes one under the name it uses:
`from tests.redis_fixtures import redis_store as store`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Any]:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def redis_store(redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    from proxy.store.redis_store import RedisStore

    opened = RedisStore(redis_url, prefix=redis_prefix)
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
async def redis_store_pair(redis_url: str, redis_prefix: str) -> AsyncIterator[tuple[Any, Any]]:
    """Two stores on one prefix: two proxy instances sharing the state."""
    from proxy.store.redis_store import RedisStore

    a, b = RedisStore(redis_url, prefix=redis_prefix), RedisStore(redis_url, prefix=redis_prefix)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


@pytest.fixture
async def redis_history(redis_url: str, redis_prefix: str) -> AsyncIterator[Any]:
    from proxy.settings import RedisSettings
    from proxy.store.redis_history import RedisHistory

    opened = RedisHistory(RedisSettings(url=redis_url, prefix=redis_prefix))
    await opened.open()
    yield opened
    await opened.close()
