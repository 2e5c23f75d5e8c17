"""A process SIGKILLed while it offloads to Redis leaves whole appends only: an offload's lines
are all in the list or none of them."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import redis

from proxy.records import ThreadKey
from proxy.settings import RedisSettings
from proxy.store import jsoncodec
from proxy.store.redis_history import RedisHistory

BATCH = 20
# Big records, so that a kill often lands while a command is still being sent.
APPENDING = f"""
import asyncio, sys
from proxy.records import ThreadKey
from proxy.settings import RedisSettings
from proxy.store.redis_history import RedisHistory

async def main(url, prefix):
    history = RedisHistory(RedisSettings(url=url, prefix=prefix))
    await history.open()
    for batch in range(10**6):
        records = [{{"batch": batch, "n": n, "pad": "x" * 40_000}} for n in range({BATCH})]
        await history.offload_async(ThreadKey("tenant", "killed"), records, at=float(batch))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_a_kill_mid_offload_leaves_whole_appends_only(redis_url: str, redis_prefix: str) -> None:
    name = RedisHistory(RedisSettings(url=redis_url, prefix=redis_prefix)).list_for(
        ThreadKey("tenant", "killed"))
    raw = redis.Redis.from_url(redis_url)
    chance = random.Random(7)
    try:
        for _ in range(4):
            child = subprocess.Popen([sys.executable, "-c", APPENDING, redis_url, redis_prefix])
            reached = raw.llen(name) + 3 * BATCH
            deadline = time.monotonic() + 30
            while raw.llen(name) < reached and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(chance.uniform(0, 0.02))
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        lines = [jsoncodec.loads(value) for value in raw.lrange(name, 0, -1)]
    finally:
        raw.close()
    assert len(lines) >= 4 * 3 * BATCH and len(lines) % BATCH == 0
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    for start in range(0, len(lines), BATCH):
        block = lines[start:start + BATCH]
        assert [line["record"]["n"] for line in block] == list(range(BATCH))
        assert len({(line["at"], line["record"]["batch"]) for line in block}) == 1
