"""State persistence: the store interface, its SQLite and Redis implementations, the history files.

The composition root calls `create_store(settings.state)` (then `await store.open()`) and
`create_history(settings.state)` (then `await history.open()`); everything above sees only
`StateStore` and `History` (history files, or a Redis list per thread: `redis_history.py`).
The Redis store (`proxy/store/redis_store.py`) and history are imported only when configured:
the default install has no `redis` package.
The read-only CLI opens the database with `open_read_only(path)` instead: a `StateDb` to read.
"""

from __future__ import annotations

from proxy.settings import StateSettings
from proxy.store.base import ANCHORS_KEPT, REDIS_MISSING, StateStore, StoreError, ThreadSummary
from proxy.store.failures import NO_HOOKS, FailureHooks
from proxy.store.history import History, HistoryContents, HistoryFiles
from proxy.store.keys import thread_key_text
from proxy.store.reader import open_read_only
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_db import StateDb

__all__ = ["ANCHORS_KEPT", "NO_HOOKS", "FailureHooks", "History", "HistoryContents", "HistoryFiles",
           "SqliteStore", "StateDb", "StateStore", "StoreError", "ThreadSummary",
           "create_history", "create_store", "open_read_only", "thread_key_text"]


def create_store(settings: StateSettings, hooks: FailureHooks = NO_HOOKS) -> StateStore:
    """The configured store, not yet open; `hooks` hear of its failures (the metrics)."""
    if settings.backend == "redis":
        return _redis_store(settings, hooks)
    if settings.backend != "sqlite":
        raise StoreError(f"state.backend {settings.backend!r} is not supported")
    return SqliteStore(settings.path, check_on_open=settings.check_on_start,
                       hooks=hooks)


def _redis_store(settings: StateSettings, hooks: FailureHooks) -> StateStore:
    try:
        from proxy.store.redis_store import RedisStore
    except ImportError as error:
        if (error.name or "").split(".")[0] != "redis":
            raise
        raise StoreError(REDIS_MISSING) from None
    redis = settings.redis
    return RedisStore(redis.url, prefix=redis.prefix, timeout_s=redis.timeout_s,
                      lease_s=redis.lease_s, hooks=hooks, retention_s=settings.retention_s)


def create_history(settings: StateSettings) -> History:
    """The configured history, not yet open."""
    if settings.backend == "redis":
        from proxy.store.redis_history import RedisHistory
        # Its `open` says so when redis is not installed.
        return RedisHistory(settings.redis, retention_s=settings.retention_s)
    return HistoryFiles.under(settings.path)
