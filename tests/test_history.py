"""History files: JSON Lines per thread, private, digest-named, torn-line tolerant."""

from __future__ import annotations

import re
import stat
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from proxy.records import CompactionEvent, ThreadKey
from proxy.server.compactor import committed_end
from proxy.store import HistoryFiles
from proxy.store.history import Appended, Discarded
from proxy.store.keys import thread_key_text

KEY = ThreadKey("tenant-a", "thread-1")
NAME = re.compile(r"[0-9a-f]{64}\.jsonl")
HOSTILE_IDS = ["x" * 10_240, "../../etc/passwd", "..", "/tmp/evil", "a\x00b",
               b"\xff\xfe".decode("utf-8", "surrogateescape"), "\ud800", "😀 日本語", ""]


def message(n: int) -> dict[str, object]:
    return {"role": "user", "content": f"message {n}"}


@pytest.fixture
def history(tmp_path: Path) -> HistoryFiles:
    return HistoryFiles.under(tmp_path / "data")


def test_append_writes_numbered_timed_lines(history: HistoryFiles) -> None:
    path = history.append(KEY, [message(1), message(2)], at=10.0)
    assert history.append(KEY, [message(3)], at=20.0) == path
    contents = history.read(path)
    assert not contents.torn
    assert [(r["seq"], r["at"], r["record"]) for r in contents.records] == [
        (1, 10.0, message(1)), (2, 10.0, message(2)), (3, 20.0, message(3))]


def test_sequence_continues_in_a_new_process(history: HistoryFiles) -> None:
    history.append(KEY, [message(1), message(2)])
    path = HistoryFiles(history.root).append(KEY, [message(3)])
    assert [r["seq"] for r in history.read(path).records] == [1, 2, 3]


def test_files_are_private(history: HistoryFiles) -> None:
    path = Path(history.append(KEY, [message(1)]))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(history.root.stat().st_mode) == 0o700


def test_a_torn_last_line_is_skipped_and_reported(history: HistoryFiles) -> None:
    path = Path(history.append(KEY, [message(1), message(2)]))
    with path.open("ab") as f:
        f.write(b'{"seq": 3, "at": 1.0, "record": {"role": "us')  # a crash mid-append
    contents = history.read(path)
    assert contents.torn and contents.damaged_lines == (3,)
    assert [r["record"] for r in contents.records] == [message(1), message(2)]


def test_appending_after_a_torn_line_keeps_new_lines_whole(history: HistoryFiles) -> None:
    path = Path(history.append(KEY, [message(1)]))
    with path.open("ab") as f:
        f.write(b'{"seq": 2, "at"')
    HistoryFiles(history.root).append(KEY, [message(3)])
    contents = history.read(path)
    assert contents.damaged_lines == (2,)
    assert [(r["seq"], r["record"]) for r in contents.records] == [(1, message(1)),
                                                                   (3, message(3))]


def test_file_names_never_contain_the_raw_thread_id(history: HistoryFiles) -> None:
    paths = {history.append(ThreadKey("tenant-a", raw), [message(n)])
             for n, raw in enumerate(HOSTILE_IDS)}
    assert len(paths) == len(HOSTILE_IDS)
    for path in map(Path, paths):
        assert path.parent == history.root and NAME.fullmatch(path.name)
    assert sorted(p.name for p in history.root.iterdir()) == sorted(Path(p).name for p in paths)
    assert sorted(p.name for p in history.root.parent.iterdir()) == ["history"]


def test_one_thread_one_file_per_tenant(history: HistoryFiles) -> None:
    raw = "\x00odd"
    normalized = thread_key_text(raw)
    assert history.path_for(ThreadKey("a", raw)) == history.path_for(ThreadKey("a", normalized))
    assert history.path_for(ThreadKey("a", "t")) != history.path_for(ThreadKey("b", "t"))


def test_read_refuses_paths_outside_the_history_directory(history: HistoryFiles,
                                                         tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("{}\n")
    for path in (outside, history.root / ".." / "elsewhere.jsonl", history.root / "x.txt"):
        with pytest.raises(ValueError):
            history.read(path)


def test_records_with_lone_surrogates_are_kept(history: HistoryFiles) -> None:
    record = {"role": "tool", "content": "bytes \udcff\ud800 😀"}
    path = history.append(KEY, [record])
    assert history.read(path).records[0]["record"] == record


async def test_async_wrappers_run_off_the_loop(tmp_path: Path) -> None:
    threads: list[int] = []

    class Recording(HistoryFiles):
        def offload(self, key: ThreadKey, records: Iterable[dict[str, Any]],
                    at: float | None = None) -> Appended:
            threads.append(threading.get_ident())
            return super().offload(key, records, at)

    history = Recording(tmp_path)
    path = (await history.offload_async(KEY, (message(n) for n in range(3)))).path
    contents = await history.read_async(path)
    assert [r["seq"] for r in contents.records] == [1, 2, 3]
    assert threads and threading.get_ident() not in threads


def test_retract_takes_an_append_back_and_numbering_goes_on(history: HistoryFiles) -> None:
    path = history.append(KEY, [message(1)], at=1.0)
    size = Path(path).stat().st_size
    appended = history.offload(KEY, [message(2), message(3)], at=2.0)
    assert history.retract(appended)
    assert Path(path).stat().st_size == size
    history.append(KEY, [message(4)], at=3.0)
    assert [(r["seq"], r["record"]) for r in history.read(path).records] == [
        (1, message(1)), (2, message(4))]


def test_retract_leaves_lines_appended_after_it(history: HistoryFiles) -> None:
    appended = history.offload(KEY, [message(1)])
    history.append(KEY, [message(2)])
    assert not history.retract(appended)
    assert len(history.read(appended.path).records) == 2


def test_retract_after_a_torn_line_keeps_the_file_readable(history: HistoryFiles) -> None:
    path = Path(history.append(KEY, [message(1)]))
    with path.open("ab") as f:
        f.write(b'{"seq": 2, "at": 1, "rec')
    appended = HistoryFiles(history.root).offload(KEY, [message(3)])
    assert history.retract(appended)
    history.append(KEY, [message(4)])
    contents = history.read(path)
    assert [r["record"] for r in contents.records] == [message(1), message(4)]
    assert contents.damaged_lines == (2,)


def test_a_write_that_fails_half_way_is_cut_off(history: HistoryFiles,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import proxy.store.history as module
    path = Path(history.append(KEY, [message(1)]))
    size = path.stat().st_size

    def disk_full(fd: int, data: bytes) -> None:
        module.os.write(fd, data[:7])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "_write_all", disk_full)
    with pytest.raises(OSError):
        history.append(KEY, [message(2)])
    monkeypatch.undo()
    assert path.stat().st_size == size
    history.append(KEY, [message(3)])
    contents = history.read(path)
    assert not contents.torn and [r["seq"] for r in contents.records] == [1, 2]



# ------------------------------------------------------- lines no committed checkpoint accounts for


def _size(path: str | Path) -> int:
    return Path(path).stat().st_size


def test_discard_tail_cuts_what_lies_past_the_committed_end(history: HistoryFiles) -> None:
    path = history.append(KEY, [message(1), message(2)])
    end = _size(path)
    history.append(KEY, [message(3), message(4)])  # a kill came before its checkpoint
    longer = _size(path)
    assert history.discard_tail(KEY, end) == Discarded(end, longer - end, 2)
    assert _size(path) == end
    history.append(KEY, [message(5)])
    assert [(r["seq"], r["record"]) for r in history.read(path).records] == [
        (1, message(1)), (2, message(2)), (3, message(5))]


def test_discard_tail_to_zero_empties_the_file(history: HistoryFiles) -> None:
    path = history.append(KEY, [message(1)])  # a thread without a checkpoint: all left over
    size = _size(path)
    assert history.discard_tail(KEY, 0) == Discarded(0, size, 1)
    assert _size(path) == 0
    HistoryFiles(history.root).append(KEY, [message(2)])
    assert [(r["seq"], r["record"]) for r in history.read(path).records] == [(1, message(2))]


def test_discard_tail_leaves_a_file_at_or_before_the_end_untouched(history: HistoryFiles) -> None:
    path = history.append(KEY, [message(1), message(2)])
    data = Path(path).read_bytes()
    assert history.discard_tail(KEY, len(data)) == Discarded(len(data))
    assert history.discard_tail(KEY, len(data) + 100) == Discarded(len(data))
    assert Path(path).read_bytes() == data
    history.append(KEY, [message(3)])
    assert [r["seq"] for r in history.read(path).records] == [1, 2, 3]


def test_discard_tail_cuts_a_torn_last_line(history: HistoryFiles) -> None:
    path = Path(history.append(KEY, [message(1)]))
    end = _size(path)
    history.append(KEY, [message(2)])
    with path.open("ab") as f:
        f.write(b'{"seq": 3, "at": 1.0, "record": {"role": "us')  # the kill came mid-append
    found = HistoryFiles(history.root).discard_tail(KEY, end)
    assert (found.size, found.lines) == (end, 2)  # one whole line and the torn one
    contents = history.read(path)
    assert not contents.torn and [r["record"] for r in contents.records] == [message(1)]


def test_discard_tail_on_a_missing_file_creates_nothing(history: HistoryFiles) -> None:
    assert history.discard_tail(KEY, 0) == Discarded(0)
    assert history.discard_tail(KEY, 500) == Discarded(0)
    assert not history.path_for(KEY).exists()


def test_the_cut_is_on_disk_before_the_next_append(history: HistoryFiles,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import proxy.store.history as module
    path = history.append(KEY, [message(1)])
    end = _size(path)
    history.append(KEY, [message(2)])
    calls: list[str] = []
    for name in ("ftruncate", "fsync", "write"):
        real = getattr(module.os, name)
        monkeypatch.setattr(module.os, name, lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    history.discard_tail(KEY, end)
    history.append(KEY, [message(3)])
    monkeypatch.undo()
    assert calls[:3] == ["ftruncate", "fsync", "write"]


async def test_discard_tail_async_runs_off_the_loop(history: HistoryFiles) -> None:
    path = history.append(KEY, [message(1)])
    end = _size(path)
    history.append(KEY, [message(2)])
    assert (await history.discard_tail_async(KEY, end)).lines == 1
    assert _size(path) == end


def test_the_committed_end_of_a_thread() -> None:
    def event(end: int | None) -> CompactionEvent:
        return CompactionEvent(cutoff_index=1, cutoff_message_id=None, prefix_digest="d",
                               summary_message={}, history_end=end)

    assert committed_end(None) == 0  # no checkpoint: every line is left over
    assert committed_end(event(1234)) == 1234
    assert committed_end(event(0)) == 0
    assert committed_end(event(None)) is None  # stored before it was recorded: cut nothing
    old = {k: v for k, v in event(7).to_data().items() if k != "history_end"}
    assert CompactionEvent.from_data(old).history_end is None
