"""What the compactor relies on of a thread's history, on files and on Redis alike (`History`).

Positions (`Appended.end`, `Discarded.size`) are each implementation's own unit (bytes for
files, lines for Redis), so these tests only ever compare a position with one it returned.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.records import ThreadKey
from proxy.settings import RedisSettings
from proxy.store import History, HistoryFiles
from proxy.store.history import Discarded
from proxy.store.keys import thread_key_text
from proxy.store.redis_history import RedisHistory

KEY = ThreadKey("tenant-a", "thread-1")
HOSTILE_IDS = ["x" * 10_240, "../../etc/passwd", "..", "/tmp/evil", "a\x00b", "a b\r\nDEL *",
               b"\xff\xfe".decode("utf-8", "surrogateescape"), "\ud800", "😀 日本語", "", "*",
               "h:" + "0" * 64]


def message(n: int) -> dict[str, object]:
    return {"role": "user", "content": f"message {n}"}


@pytest.fixture(params=["files", "redis"])
async def history(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[History]:
    if request.param == "files":
        made: History = HistoryFiles.under(tmp_path / "data")
    else:
        made = RedisHistory(RedisSettings(url=request.getfixturevalue("redis_url"),
                                          prefix=request.getfixturevalue("redis_prefix")))
    await made.open()
    try:
        yield made
    finally:
        await made.close()


async def _seqs(history: History, path: str) -> list[tuple[int, object]]:
    contents = await history.read_async(path)
    assert not contents.torn
    return [(line["seq"], line["record"]) for line in contents.records]


async def test_offload_writes_numbered_timed_lines(history: History) -> None:
    first = await history.offload_async(KEY, [message(1), message(2)], at=10.0)
    second = await history.offload_async(KEY, iter([message(3)]), at=20.0)
    assert first.path == second.path and first.end == second.start > first.start == 0
    contents = await history.read_async(first.path)
    assert [(r["seq"], r["at"], r["record"]) for r in contents.records] == [
        (1, 10.0, message(1)), (2, 10.0, message(2)), (3, 20.0, message(3))]


async def test_an_offload_without_records_changes_nothing(history: History) -> None:
    before = await history.offload_async(KEY, [message(1)])
    empty = await history.offload_async(KEY, [])
    assert empty.start == empty.end == before.end
    assert await _seqs(history, before.path) == [(1, message(1))]


async def test_retract_takes_an_append_back_and_numbering_goes_on(history: History) -> None:
    kept = await history.offload_async(KEY, [message(1)], at=1.0)
    appended = await history.offload_async(KEY, [message(2), message(3)], at=2.0)
    assert await history.retract_async(appended)
    again = await history.offload_async(KEY, [message(4)], at=3.0)
    assert again.start == kept.end
    assert await _seqs(history, kept.path) == [(1, message(1)), (2, message(4))]


async def test_retract_of_the_first_append_leaves_an_empty_history(history: History) -> None:
    appended = await history.offload_async(KEY, [message(1), message(2)])
    assert await history.retract_async(appended)
    assert (await history.read_async(appended.path)).records == []
    assert (await history.offload_async(KEY, [message(3)])).start == 0


async def test_retract_is_refused_after_a_later_append(history: History) -> None:
    appended = await history.offload_async(KEY, [message(1)])
    await history.offload_async(KEY, [message(2)])
    assert not await history.retract_async(appended)
    assert await _seqs(history, appended.path) == [(1, message(1)), (2, message(2))]


async def test_discard_tail_cuts_what_lies_past_the_committed_end(history: History) -> None:
    committed = await history.offload_async(KEY, [message(1), message(2)])
    await history.offload_async(KEY, [message(3), message(4)])  # a kill came before its checkpoint
    found = await history.discard_tail_async(KEY, committed.end)
    assert (found.size, found.lines) == (committed.end, 2) and found.bytes > 0
    await history.offload_async(KEY, [message(5)])
    assert await _seqs(history, committed.path) == [
        (1, message(1)), (2, message(2)), (3, message(5))]


async def test_discard_tail_to_zero_empties_the_history(history: History) -> None:
    appended = await history.offload_async(KEY, [message(1)])  # no checkpoint: all left over
    found = await history.discard_tail_async(KEY, 0)
    assert (found.size, found.lines) == (0, 1) and found.bytes > 0
    assert (await history.offload_async(KEY, [message(2)])).start == 0
    assert await _seqs(history, appended.path) == [(1, message(2))]


async def test_discard_tail_leaves_a_history_at_or_before_the_end_alone(history: History) -> None:
    appended = await history.offload_async(KEY, [message(1), message(2)])
    assert await history.discard_tail_async(KEY, appended.end) == Discarded(appended.end)
    assert await history.discard_tail_async(KEY, appended.end + 100) == Discarded(appended.end)
    await history.offload_async(KEY, [message(3)])
    assert [seq for seq, _ in await _seqs(history, appended.path)] == [1, 2, 3]


async def test_discard_tail_of_an_unknown_thread_is_nothing(history: History) -> None:
    assert await history.discard_tail_async(KEY, 0) == Discarded(0)
    assert await history.discard_tail_async(KEY, 500) == Discarded(0)


async def test_records_with_lone_surrogates_are_kept(history: History) -> None:
    record = {"role": "tool", "content": "bytes \udcff\ud800 😀"}
    appended = await history.offload_async(KEY, [record, message(2)])
    assert await _seqs(history, appended.path) == [(1, record), (2, message(2))]


async def test_hostile_ids_each_get_a_history_that_never_names_them(history: History) -> None:
    paths = set()
    for n, raw in enumerate(HOSTILE_IDS):
        for tenant in ("tenant-a", raw):
            appended = await history.offload_async(ThreadKey(tenant, raw), [message(n)])
            paths.add(appended.path)
            assert await _seqs(history, appended.path) == [(1, message(n))]
    assert len(paths) == 2 * len(HOSTILE_IDS)
    for path in paths:  # the name is the digest alone, whatever the id and tenant
        assert re.fullmatch(r"[0-9a-f]{64}(\.jsonl)?", re.split(r"[:/]", path)[-1])


async def test_one_history_per_thread_and_tenant(history: History) -> None:
    raw = "\x00odd"
    one = await history.offload_async(ThreadKey("a", raw), [message(1)])
    same = await history.offload_async(ThreadKey("a", thread_key_text(raw)), [message(2)])
    other = await history.offload_async(ThreadKey("b", raw), [message(3)])
    assert one.path == same.path != other.path


async def test_read_refuses_what_is_not_its_own_history(history: History, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    for path in (str(outside), "redis:elsewhere:h:" + "0" * 64, "redis:x", "../x.jsonl"):
        with pytest.raises(ValueError):
            await history.read_async(path)
