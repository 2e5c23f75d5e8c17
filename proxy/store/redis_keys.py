"""The names of the Redis state backend's keys: no client text ever appears in one.

Every key starts with `state.redis.prefix`. A thread's keys carry `thread_digest(key)`, the
sha256 of its storable (tenant, thread id), the same digest that names its history file
(`proxy.store.history.HistoryFiles.path_for`), so a thread's keys and history sit side by
side. The thread id and tenant themselves are values (in the thread's hash), for `find`,
`list_threads` and the CLI to show.

    <prefix>version          string  the layout's version (`LAYOUT_VERSION`)
    <prefix>threads          zset    thread digests, scored by last activity
    <prefix>t:<digest>       hash    the thread: tenant, thread, created_at, last_activity,
                                     last_estimate, estimate_at (its touch's time),
                                     event_count, anchor_at, microcompact
    <prefix>a:<digest>       list    usage anchors (JSON), newest first, `ANCHORS_KEPT` at most
    <prefix>e:<digest>       list    checkpoints (JSON), oldest first: seq = position + 1
    <prefix>l:<digest>       string  the compaction lease's token, expiring after `lease_s`
    <prefix>h:<digest>       ...     the thread's history (the Redis history files' keys)
    <prefix>f:<id digest>    set     the tenants that have a thread with this id (`find`)
    <prefix>o:<id digest>    string  the upstream that made a stored answer, expiring

`<id digest>` is the sha256 of the text (a storable thread id, an upstream's answer id).
With `state.retention_days`, a thread's `t:`, `a:`, `e:`, `h:` and its id's `f:` expire that
long after the thread's last write, which renews them all (`proxy/store/redis_scripts.py`).
"""

from __future__ import annotations

# Imported from here by the Redis modules as part of the layout: the thread's digest is its
# history's (`proxy.store.history`), an id's that of its storable text (`proxy.store.keys`).
from proxy.store.history import thread_digest
from proxy.store.keys import text_digest

__all__ = ["LAYOUT_VERSION", "RedisKeys", "text_digest", "thread_digest"]

LAYOUT_VERSION = 1


class RedisKeys:
    """The key names under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.version = f"{prefix}version"
        self.threads = f"{prefix}threads"

    def thread(self, digest: str) -> str:
        return f"{self.prefix}t:{digest}"

    def anchors(self, digest: str) -> str:
        return f"{self.prefix}a:{digest}"

    def events(self, digest: str) -> str:
        return f"{self.prefix}e:{digest}"

    def lease(self, digest: str) -> str:
        return f"{self.prefix}l:{digest}"

    def history(self, digest: str) -> str:
        return f"{self.prefix}h:{digest}"

    def tenants_of(self, thread: str) -> str:
        """The set of tenants with a thread of this (storable) id."""
        return f"{self.prefix}f:{text_digest(thread)}"

    def origin(self, made_id: str) -> str:
        return f"{self.prefix}o:{text_digest(made_id)}"
