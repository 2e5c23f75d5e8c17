"""The SQLite state store: round trips, isolation, hostile ids, concurrency, draining."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey
from proxy.settings import StateSettings
from proxy.store import ANCHORS_KEPT, SqliteStore, StoreError, create_store
from proxy.store.reader import open_read_only
from proxy.store.sqlite_db import StateDb

KEY = ThreadKey("tenant-a", "thread-1")
HOSTILE_IDS = [
    "x" * 10_240, "../../etc/passwd", "..", "/", "a\x00b", "\x00",
    b"id-\xff\xfe\x80".decode("utf-8", "surrogateescape"), "\ud800", "\udfff tail",
    "😀 日本語 \u202e", "", " ", "\r\n", "~", "~" + "0" * 64, "C:\\con\\aux",
]


def anchor(n: int) -> Anchor:
    return Anchor(response_digests=(f"r{n}", f"s{n}"), position=n, prefix_digest=f"p{n}",
                  input_tokens=1000 + n, output_tokens=10, cached_tokens=500,
                  reasoning_tokens=3, model="gpt-4o", created_at=100.0 + n)


def event(n: int, content: str = "summary") -> CompactionEvent:
    return CompactionEvent(
        cutoff_index=n, cutoff_message_id=f"m{n}", prefix_digest=f"d{n}",
        summary_message={"role": "user", "content": f"{content} {n}"},
        restore_messages=({"role": "user", "content": "keep going"},),
        history_file="/data/history/x.jsonl", strategy="partial", tokens_before=9000,
        tokens_after=3000, created_at=200.0 + n, model="gpt-4o", summarizer_model="mini",
        api="responses", offload_error=None)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "state")
    await opened.open()
    yield opened
    await opened.close()


async def reopen(store: SqliteStore) -> SqliteStore:
    await store.close()
    again = SqliteStore(store.root)
    await again.open()
    return again


async def test_unknown_thread_loads_empty(store: SqliteStore) -> None:
    state = await store.load(KEY)
    assert not state.known and state.key == KEY
    assert (state.anchors, state.event, state.microcompact) == ((), None, None)
    assert state.event_count == 0


async def test_every_record_round_trips_across_reopen(store: SqliteStore) -> None:
    mark = MicrocompactMark(through_message_id="m7", through_index=7, created_at=300.0)
    store.record_request(KEY, 150.0, 1234)  # after the anchor's time: the touch is read back
    store.add_anchor(KEY, anchor(1))
    stored = await store.add_event(KEY, event(1))
    await store.set_microcompact(KEY, mark)
    store = await reopen(store)
    state = await store.load(KEY)
    assert (state.created_at, state.last_activity, state.last_estimate) == (150.0, 150.0, 1234)
    assert state.anchors == (anchor(1),)
    assert state.event == stored == replace(event(1), seq=1)
    assert state.event_count == 1 and state.microcompact == mark
    await store.close()


async def test_text_with_lone_surrogates_round_trips(store: SqliteStore) -> None:
    odd = event(1, content="bad \ud800 bytes \udcff and 😀")
    await store.add_event(KEY, odd)
    assert (await store.load(KEY)).event.summary_message == odd.summary_message  # type: ignore[union-attr]


async def test_events_get_increasing_seq_and_latest_wins(store: SqliteStore) -> None:
    seqs = [(await store.add_event(KEY, event(n))).seq for n in range(1, 4)]
    state = await store.load(KEY)
    assert seqs == [1, 2, 3] and state.event_count == 3 and state.event.cutoff_index == 3  # type: ignore[union-attr]
    assert [e.cutoff_index for e in await store.events(KEY)] == [1, 2, 3]


async def test_only_the_latest_anchors_are_kept_latest_first(store: SqliteStore) -> None:
    for n in range(ANCHORS_KEPT + 10):
        store.add_anchor(KEY, anchor(n))
    positions = [a.position for a in (await store.load(KEY)).anchors]
    assert positions == list(range(ANCHORS_KEPT + 9, 9, -1))
    rows = await store._run(lambda: store._require_db().conn.execute(
        "SELECT count(*) FROM anchors").fetchone()[0])
    assert rows == ANCHORS_KEPT


async def test_anchors_of_a_batch_keep_their_order_per_thread_and_rows_stay_bounded(
        store: SqliteStore) -> None:
    other = ThreadKey("tenant-a", "thread-2")
    for round_ in range(5):  # interleaved threads, some batches drained between
        for n in range(round_ * 7, round_ * 7 + 7):
            store.add_anchor(KEY, anchor(n))
            store.add_anchor(other, anchor(1000 + n))
        if round_ % 2:
            await store.flush()
    mine, theirs = (await store.load(KEY)).anchors, (await store.load(other)).anchors
    assert [a.position for a in mine] == list(range(34, 34 - ANCHORS_KEPT, -1))
    assert [a.position for a in theirs] == list(range(1034, 1034 - ANCHORS_KEPT, -1))
    counts = await store._run(lambda: store._require_db().conn.execute(
        "SELECT thread, count(*) FROM anchors GROUP BY thread").fetchall())
    assert all(ANCHORS_KEPT <= n < 2 * ANCHORS_KEPT for _, n in counts)


async def test_an_anchor_retried_after_a_failed_batch_still_gets_its_thread(
        store: SqliteStore) -> None:
    fresh, broken = ThreadKey("tenant-b", "thread-9"), ThreadKey("tenant-c", "thread-0")
    store.add_anchor(fresh, anchor(2))  # inserted, then rolled back with its batch...
    store.add_anchor(broken, replace(anchor(3), model=object()))  # ...that this fails
    await store.flush()  # the writes are retried one by one: only the broken one fails
    assert store.writer.failed == 1
    state = await store.load(fresh)
    assert state.known and [a.position for a in state.anchors] == [2]
    assert not (await store.load(broken)).known


async def test_touch_keeps_latest_activity_and_last_known_estimate(store: SqliteStore) -> None:
    store.record_request(KEY, 10.0, 500)
    store.record_request(KEY, 30.0, None)
    store.record_request(KEY, 20.0, 700)
    state = await store.load(KEY)
    assert (state.created_at, state.last_activity, state.last_estimate) == (10.0, 30.0, 700)


async def test_queued_writes_are_seen_by_the_next_load(store: SqliteStore) -> None:
    store.record_request(KEY, 10.0, 99)
    store.add_anchor(KEY, anchor(1))
    state = await store.load(KEY)  # no flush in between
    assert state.last_estimate == 99 and state.anchors == (anchor(1),)


async def test_two_tenants_with_one_thread_id_never_see_each_other(store: SqliteStore) -> None:
    a, b = ThreadKey("tenant-a", "shared"), ThreadKey("tenant-b", "shared")
    store.record_request(a, 1.0, 111)
    store.add_anchor(a, anchor(1))
    await store.add_event(a, event(1, "secret of a"))
    await store.set_microcompact(a, MicrocompactMark("m1", 1))
    assert not (await store.load(b)).known
    await store.add_event(b, event(5, "b's own"))
    state_a, state_b = await store.load(a), await store.load(b)
    assert state_a.event.summary_message["content"] == "secret of a 1"  # type: ignore[union-attr]
    assert state_b.event.summary_message["content"] == "b's own 5"  # type: ignore[union-attr]
    assert state_b.anchors == () and state_b.microcompact is None and state_b.event.seq == 1  # type: ignore[union-attr]
    assert sorted(s.key.tenant for s in await store.find("shared")) == ["tenant-a", "tenant-b"]


async def test_hostile_thread_ids_round_trip_without_collisions(store: SqliteStore) -> None:
    for n, raw in enumerate(HOSTILE_IDS):
        key = ThreadKey("tenant-a", raw)
        store.record_request(key, float(n), n)
        await store.add_event(key, event(n))
    for n, raw in enumerate(HOSTILE_IDS):
        state = await store.load(ThreadKey("tenant-a", raw))
        assert state.last_estimate == n and state.event.cutoff_index == n  # type: ignore[union-attr]
        assert [s.last_estimate for s in await store.find(raw)] == [n]
    listed = await store.list_threads(limit=1000)
    assert len(listed) == len(HOSTILE_IDS)
    assert all(0 < len(s.thread) <= 256 and s.thread.isprintable() for s in listed)
    assert sorted(p.name for p in store.root.iterdir()) == ["state.db", "state.db-shm",
                                                            "state.db-wal", "state.lock"]


async def test_list_threads_most_recent_first_with_summary_fields(store: SqliteStore) -> None:
    for n in range(5):
        store.record_request(ThreadKey("t", f"th{n}"), float(n), n * 10)
    await store.add_event(ThreadKey("t", "th3"), event(1))
    listed = await store.list_threads(limit=3)
    assert [s.thread for s in listed] == ["th4", "th3", "th2"]
    assert (listed[1].tenant, listed[1].event_count, listed[1].last_estimate) == ("t", 1, 30)


async def test_many_concurrent_writes_are_all_persisted(store: SqliteStore) -> None:
    async def one(n: int) -> int:
        key = ThreadKey("t", f"th{n % 10}")
        store.record_request(key, 1000.0 + n, n)  # after every anchor's time
        store.add_anchor(key, anchor(n))
        return (await store.add_event(key, event(n))).seq

    await asyncio.gather(*(one(n) for n in range(300)))
    store = await reopen(store)
    for thread in range(10):
        key = ThreadKey("t", f"th{thread}")
        state, events = await store.load(key), await store.events(key)
        assert [e.seq for e in events] == list(range(1, 31)) and state.event_count == 30
        assert sorted(e.cutoff_index for e in events) == list(range(thread, 300, 10))
        assert len(state.anchors) == ANCHORS_KEPT
        assert state.last_activity == 1290.0 + thread
    await store.close()


def block_worker(store: SqliteStore) -> threading.Event:
    """Park the store's worker thread until the returned event is set."""
    release = threading.Event()
    store._require_executor().submit(release.wait, 10)
    return release


async def test_queued_writes_do_not_wait_for_the_disk(store: SqliteStore) -> None:
    release = block_worker(store)
    store.record_request(KEY, 1.0, 7)  # a plain call: it returns with the worker parked
    store.add_anchor(KEY, anchor(1))
    assert store.writer.pending == 2
    release.set()
    assert (await store.load(KEY)).last_estimate == 7


async def test_close_drains_queued_writes(store: SqliteStore) -> None:
    release = block_worker(store)
    for n in range(500):
        store.record_request(KEY, 1000.0 + n, n)  # after every anchor's time
        store.add_anchor(KEY, anchor(n))
    assert store.writer.pending == 1000
    closing = asyncio.create_task(store.close())
    release.set()
    await closing
    store = await reopen(store)
    state = await store.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1499.0, 499)
    assert state.anchors[0].position == 499 and store.writer.failed == 0
    await store.close()


async def test_sqlite_is_only_reachable_from_the_worker_thread(store: SqliteStore) -> None:
    with pytest.raises(sqlite3.ProgrammingError, match="thread"):
        store._require_db().conn.execute("SELECT 1")


async def test_integrity_check_is_ok_and_files_are_private(store: SqliteStore) -> None:
    await store.add_event(KEY, event(1))
    assert await store.integrity_check() == "ok"
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    for name in ("state.db", "state.db-wal"):
        assert stat.S_IMODE((store.root / name).stat().st_mode) == 0o600
    mode = await store._run(lambda: store._require_db().conn.execute(
        "PRAGMA journal_mode").fetchone()[0])
    assert mode == "wal"


async def test_calls_on_a_closed_store_fail_clearly(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    with pytest.raises(StoreError):
        await store.load(KEY)
    await store.open()
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreError):
        store.record_request(KEY, 1.0, None)


async def test_create_store_from_settings(tmp_path: Path) -> None:
    store = create_store(StateSettings(path=str(tmp_path / "nested" / "data")))
    await store.open()
    store.record_request(KEY, 1.0, 5)
    assert (await store.load(KEY)).last_estimate == 5
    await store.close()


@pytest.mark.parametrize("created_at,last_activity,last_estimate,estimate_at", [
    (1.0, 2.0, 4, None), (None, None, None, None), (1.0, 9.0, None, None), (1.0, 9.0, 4, 4.0)])
@pytest.mark.parametrize("at,estimate", [(5.0, 9), (3.0, None), (0.5, 7), (4.0, 8)])
def test_the_cached_states_quick_updates_equal_dataclasses_replace(
        created_at: float | None, last_activity: float | None, last_estimate: int | None,
        estimate_at: float | None, at: float, estimate: int | None) -> None:
    from proxy.records import ThreadState
    from proxy.store.base import ANCHORS_KEPT
    from proxy.store.cached import _anchored, _touched
    anchors = tuple(anchor(n) for n in range(ANCHORS_KEPT))
    state = ThreadState(KEY, created_at=created_at, last_activity=last_activity,
                        last_estimate=last_estimate, estimate_at=estimate_at, event_count=3,
                        extra={"a": 1}, anchors=anchors)
    touched = _touched(state, at, estimate)
    # The estimate of the newer touch by its time (an unknown time is older than any)
    newer = estimate is not None and (estimate_at is None or at >= estimate_at)
    assert touched == replace(
        state, created_at=at if created_at is None else created_at,
        last_activity=max(at, last_activity or at),
        last_estimate=estimate if newer else last_estimate,
        estimate_at=at if newer else estimate_at)
    newest = anchor(99)
    assert _anchored(state, newest) == replace(
        state, anchors=(newest, *anchors)[:ANCHORS_KEPT])
    assert state.last_activity == last_activity and state.anchors == anchors


def test_a_load_reads_one_commit_while_the_owner_writes(tmp_path: Path) -> None:
    # `inspect` reads beside the running proxy: a checkpoint committed between the load's
    # statements must not show up beside the thread row from before it.
    owner = StateDb.connect(tmp_path)
    key = ThreadKey("tenant", "t")
    owner.write(owner.add_event, key, event(1))
    reader = open_read_only(tmp_path)
    read_anchors = reader._anchors

    def anchors_while_a_checkpoint_commits(k: ThreadKey) -> tuple:
        owner.write(owner.add_event, key, event(2, "newer"), durable=True)
        return read_anchors(k)

    reader._anchors = anchors_while_a_checkpoint_commits  # type: ignore[method-assign]
    try:
        state = reader.load(key)
        assert state.event is not None and state.event.seq == state.event_count == 1
        assert reader.load(key).event_count == 2, "the next load sees the new commit"
    finally:
        reader.close()
        owner.close()
