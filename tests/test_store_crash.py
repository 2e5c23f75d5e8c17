"""SIGKILL at random points: the database stays sound and the latest event is whole.

A child process writes checkpoints (big summaries whose digest is stored beside them),
anchors, touches and history lines in a loop; it is killed with SIGKILL several times at
random moments. After each kill the store must reopen, pass `PRAGMA integrity_check`, and
every event must be whole and numbered without gaps.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from contextlib import closing
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store import HistoryFiles, SqliteStore
from tests.process import kill_script

KEY = ThreadKey("tenant", "thread")
CHILD = """
import asyncio, hashlib, sys, time
from proxy.records import Anchor, CompactionEvent, ThreadKey
from proxy.store import HistoryFiles, SqliteStore

async def main(root):
    store, history = SqliteStore(root), HistoryFiles.under(root)
    await store.open()
    key = ThreadKey("tenant", "thread")
    n = (await store.load(key)).event_count
    print("ready", flush=True)
    while True:
        n += 1
        payload = (f"{n}:" * 40_000)[: 100_000 + n]
        history.append(key, [{"role": "user", "content": payload}])
        store.record_request(key, time.time(), n)
        store.add_anchor(key, Anchor((f"r{n}",), n, f"p{n}", n, 1, created_at=time.time()))
        await store.add_event(key, CompactionEvent(
            cutoff_index=n, cutoff_message_id=f"m{n}",
            prefix_digest=hashlib.sha256(payload.encode()).hexdigest(),
            summary_message={"role": "user", "content": payload}, created_at=time.time()))

asyncio.run(main(sys.argv[1]))
"""


async def assert_sound(root: Path) -> int:
    with closing(sqlite3.connect(root / "state.db")) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = SqliteStore(root)
    await store.open()
    try:
        state, events = await store.load(KEY), await store.events(KEY)
    finally:
        await store.close()
    assert [e.seq for e in events] == list(range(1, state.event_count + 1))
    for event in events:
        content = event.summary_message["content"].encode()
        assert event.cutoff_index == event.seq
        assert hashlib.sha256(content).hexdigest() == event.prefix_digest
    assert state.event == (events[-1] if events else None)
    assert all(a.input_tokens == a.position for a in state.anchors)
    return state.event_count


async def test_sigkill_never_leaves_a_broken_database_or_half_an_event(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    counts = []
    for _ in range(5):
        kill_script(CHILD, [str(tmp_path)], b"ready\n", rng.uniform(0.0, 0.25))
        counts.append(await assert_sound(tmp_path))
    assert counts == sorted(counts) and counts[-1] > 0, f"seed {seed}: {counts}"
    print(f"seed {seed}: events after each kill {counts}")
    history = HistoryFiles.under(tmp_path)
    contents = history.read(history.path_for(KEY))
    assert len(contents.damaged_lines) <= len(counts), f"seed {seed}"
    assert all(whole(r["record"]["content"]) for r in contents.records), f"seed {seed}"


def whole(content: str) -> bool:
    n = int(content.split(":", 1)[0])
    return content == (f"{n}:" * 40_000)[: 100_000 + n]
