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
