"""The background writer: batches, scheduling, and one bad write not sinking the rest."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.store.writer import BackgroundWriter, Write


class Sink:
    def __init__(self) -> None:
        self.batches: list[list[object]] = []

    def apply(self, writes: Sequence[Write]) -> None:
        results = [write() for write in writes]  # a raising write aborts the whole batch
        self.batches.append(results)


def constant(value: int) -> Write:
    return lambda: value


def test_one_drain_is_scheduled_per_burst_and_takes_the_whole_batch() -> None:
    sink = Sink()
    writer = BackgroundWriter(sink.apply)
    assert [writer.put(constant(n)) for n in range(3)] == [True, False, False]
    assert writer.drain() == 3 and sink.batches == [[0, 1, 2]]
    assert writer.put(lambda: 9) is True and writer.pending == 1


def test_a_failing_write_is_counted_and_the_others_still_apply() -> None:
    sink = Sink()
    writer = BackgroundWriter(sink.apply)

    def broken() -> None:
        raise ValueError("bad row")

    for write in (lambda: "a", broken, lambda: "b"):
        writer.put(write)
    writer.drain()
    assert sink.batches == [["a"], ["b"]]
    assert (writer.applied, writer.failed) == (2, 1) and "bad row" in (writer.last_error or "")


def test_draining_an_empty_queue_does_nothing() -> None:
    sink = Sink()
    assert BackgroundWriter(sink.apply).drain() == 0 and sink.batches == []


def test_the_failures_of_a_batch_are_told_once_with_their_count_and_last_error() -> None:
    sink = Sink()
    told: list[tuple[int, str]] = []
    writer = BackgroundWriter(sink.apply, lambda count, error: told.append((count, str(error))))

    def broken(n: int) -> Write:
        def write() -> None:
            raise ValueError(f"bad row {n}")
        return write

    for write in (broken(1), lambda: "a", broken(2)):
        writer.put(write)
    writer.drain()
    writer.put(lambda: "b")
    writer.drain()
    assert told == [(2, "bad row 2")] and writer.failed == 2 and sink.batches == [["a"], ["b"]]
