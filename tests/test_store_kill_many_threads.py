"""SIGKILL at random instants while many threads write through the cached store: every thread's
state afterwards is one its writes fully made.

A child process runs the proxy's write path for several threads at once: per step a touch and
an anchor (queued), every second step a microcompact mark (awaited), every third a compaction
as the compactor makes one (cut the history file back to the committed checkpoint's end,
offload, then the checkpoint with that end). It is killed several times at random moments;
after each kill `check-state` is clean, the store opens again (the lock is free) and each
thread's state is a prefix of what its writes made: anchors without a gap, checkpoints numbered
without a gap and whole, nothing recorded that a write still missing must precede, and the
history file, up to the end the last checkpoint recorded, exactly the lines of its checkpoints.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from contextlib import closing
from pathlib import Path

import pytest

from proxy.cli_state import check_state
from proxy.records import ThreadKey, ThreadState
from proxy.settings import Settings, StateSettings
from proxy.store import SqliteStore, open_read_only
from proxy.store.history import parse_lines
from tests.process import kill_script

THREADS = [ThreadKey("tenant", f"thread-{n}") for n in range(6)]
ROUNDS = 6
CHILD = """
import asyncio, hashlib, sys, time
from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey
from proxy.store import HistoryFiles, SqliteStore
from proxy.store.cached import CachedStore

def payload(n):
    return (f"{n}:" * 20_000)[: 20_000 + 97 * (n % 300)]

async def step(store, history, key, n):
    store.record_request(key, float(n), n)
    store.add_anchor(key, Anchor((f"r{n}",), n, f"p{n}", n, 1, created_at=float(n)))
    if n % 2 == 0:
        await store.set_microcompact(key, MicrocompactMark(f"m{n}", n, created_at=float(n)))
    if n % 3 == 0:
        latest = (await store.load(key)).event
        end = 0 if latest is None else latest.history_end
        await history.discard_tail_async(key, end)
        text = payload(n)
        appended = await history.offload_async(key, [{"n": n, "content": text}], float(n))
        await store.add_event(key, CompactionEvent(
            cutoff_index=n, cutoff_message_id=f"c{n}",
            prefix_digest=hashlib.sha256(text.encode()).hexdigest(),
            summary_message={"role": "user", "content": text}, history_file=appended.path,
            history_end=appended.end, created_at=float(n)))

async def run(store, history, key):
    state = await store.load(key)
    n = state.anchors[0].position if state.anchors else 0
    while True:
        n += 1
        await step(store, history, key, n)

async def main(root, threads):
    # Fewer threads held than write: the bound writes touches out too, beside the task.
    store = CachedStore(SqliteStore(root), max_threads=4, write_held_every_s=0.02)
    history = HistoryFiles.under(root)
    await store.open()
    keys = [ThreadKey("tenant", f"thread-{n}") for n in range(threads)]
    tasks = [asyncio.ensure_future(run(store, history, key)) for key in keys]
    await asyncio.sleep(0)
    print("ready", flush=True)
    await asyncio.gather(*tasks)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def payload(n: int) -> str:
    return (f"{n}:" * 20_000)[: 20_000 + 97 * (n % 300)]


def assert_check_state_clean(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = check_state(Settings(state=StateSettings(path=str(root))))
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("ok: ") and not err, (out, err)


def assert_prefix_state(state: ThreadState, touched: tuple[float, int | None]) -> int:
    """Checks one thread's state; returns its newest step."""
    positions = [a.position for a in state.anchors]
    newest = positions[0] if positions else 0
    assert positions == list(range(newest, newest - len(positions), -1)), positions
    assert len(positions) == min(newest, 16)
    assert all(a.input_tokens == a.position and a.prefix_digest == f"p{a.position}"
               and a.response_digests == (f"r{a.position}",) for a in state.anchors)
    # The row's touch is one touch, whole: its time and its estimate came from the same step.
    last_activity, last_estimate = touched
    assert last_estimate == int(last_activity) and last_activity <= newest + 1, touched
    if state.microcompact is not None:
        mark = state.microcompact
        assert mark.through_message_id == f"m{mark.through_index}"
        assert mark.through_index % 2 == 0 and mark.through_index <= newest
    return newest


def assert_events_and_history(root: Path, key: ThreadKey, newest: int) -> None:
    with closing(open_read_only(root)) as db:
        events = db.events(key)
        count = db.load(key).event_count
    assert [e.seq for e in events] == list(range(1, count + 1))
    steps = [e.cutoff_index for e in events]
    assert steps == sorted(set(steps)) and all(s % 3 == 0 and s <= newest for s in steps)
    for event in events:
        content = event.summary_message["content"]
        assert content == payload(event.cutoff_index)
        assert hashlib.sha256(content.encode()).hexdigest() == event.prefix_digest
    if not events:
        return
    data = Path(events[-1].history_file or "").read_bytes()
    assert len(data) >= (events[-1].history_end or 0)
    committed = parse_lines(data[: events[-1].history_end])
    assert not committed.torn
    assert [r["seq"] for r in committed.records] == list(range(1, len(committed.records) + 1))
    # One line per checkpoint (an attempt cut back off never shows), each whole, in order.
    assert [r["record"]["n"] for r in committed.records] == steps
    assert all(r["record"]["content"] == payload(r["record"]["n"]) for r in committed.records)


async def reopened(root: Path) -> None:
    store = SqliteStore(root)  # fails if the killed owner's lock were still held
    await store.open()
    await store.close()


def test_sigkill_leaves_every_thread_a_fully_written_state(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    reached: list[int] = []
    for _ in range(ROUNDS):
        kill_script(CHILD, [str(tmp_path), str(len(THREADS))], b"ready\n",
                    rng.uniform(0.0, 0.4))
        assert_check_state_clean(tmp_path, capsys)
        with closing(open_read_only(tmp_path)) as db:
            states = {key: db.load(key) for key in THREADS}
            rows = dict(((tenant, thread), (at, estimate)) for tenant, thread, at, estimate in
                        db.conn.execute("SELECT tenant, thread, last_activity, last_estimate "
                                        "FROM threads"))
        newest = [assert_prefix_state(states[key], rows[key]) for key in THREADS]
        for key, step in zip(THREADS, newest):
            assert_events_and_history(tmp_path, key, step)
        asyncio.run(reopened(tmp_path))
        reached.append(sum(newest))
    assert reached == sorted(reached) and reached[-1] > 0, f"seed {seed}: {reached}"
    print(f"seed {seed}: steps after each kill {reached}")
