"""Retention on Redis for the threads no write has given a TTL yet: written by a proxy from
before retention, or while `state.retention_days` was 0.

Every thread write gives the thread's keys their TTL (`proxy/store/redis_scripts.py`), so a
thread idle since then would never get one. A serving store with retention goes once through
the threads' zset as it opens, in the background, and gives each such thread what is left of
the retention since its last activity (`EXPIRE_UNTIMED`): one idle longer expires at once. A
thread with a TTL is left as it is, so a pass costs each start a read of each thread's id and
one short script per thread, pipelined `BATCH` at a time.
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio

from proxy.store.redis_connection import SERVER_ERRORS
from proxy.store.redis_eval import evalsha_args, run_pipelined
from proxy.store.redis_keys import RedisKeys
from proxy.store.redis_scripts import EXPIRE_UNTIMED

BATCH = 500


async def expiry_pass(client: redis.asyncio.Redis, keys: RedisKeys, retention_ms: str, log: Any,
                      shown_url: str) -> None:
    """`expire_untimed`, logged: `state_expiry_set` with how many threads got a TTL, or
    `state_expiry_failed` (the next start tries again)."""
    try:
        given = await expire_untimed(client, keys, retention_ms)
    except SERVER_ERRORS as error:
        log.warning("state_expiry_failed", error=type(error).__name__, redis=shown_url)
        return
    if given:
        log.info("state_expiry_set", threads=given)


async def expire_untimed(client: redis.asyncio.Redis, keys: RedisKeys, retention_ms: str,
                         now: float | None = None) -> int:
    """Give every thread without a TTL its remaining retention; returns how many got one. An
    entry the zset loses meanwhile (trimmed by a touch) may shift another past a batch: the
    next start's pass finds it."""
    at = time.time() if now is None else now
    given, start = 0, 0
    while True:
        digests = [d.decode("ascii") for d in await client.zrange(keys.threads, start,
                                                                  start + BATCH - 1)]
        start += len(digests)
        async with client.pipeline(transaction=False) as pipe:
            for digest in digests:
                pipe.hget(keys.thread(digest), "thread")
            threads = await pipe.execute()
        commands = [evalsha_args(EXPIRE_UNTIMED, (
            keys.thread(digest), keys.threads, keys.tenants_of(thread.decode("utf-8", "replace")),
            keys.anchors(digest), keys.events(digest), keys.history(digest)),
            (digest, repr(at), retention_ms))
            for digest, thread in zip(digests, threads) if thread is not None]
        results = await run_pipelined(client, commands) if commands else []
        given += sum(1 for result in results if result == 1)
        if len(digests) < BATCH:
            return given
