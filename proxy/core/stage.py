"""What every cheap stage takes and returns: `(entries, StageContext) -> StageResult`.

A stage never mutates its input and returns what it did (how many entries it changed, the
tokens that saved) instead of logging. `origins` follows each entry back to the client's list
(None for an entry a stage made), so marks and message ids survive entries being removed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from proxy.conversation import Entries, Entry
from proxy.core.window import Window
from proxy.records import MicrocompactMark
from proxy.settings import CompactionSettings

T = TypeVar("T")
Measure = Callable[[Entry], int]
Origins = tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class StageReport:
    name: str
    changed: int = 0
    tokens_saved: int = 0


class Derived:
    """Structure derived from one tuple of entries, computed once per cascade run and shared
    between the window and the stages. Tuples and entries are immutable, so the tuple's
    identity is the key; the tuple is kept with its value so the identity stays unique."""

    def __init__(self) -> None:
        self._values: dict[tuple[Hashable, int], tuple[Sequence[Entry], Any]] = {}

    def get(self, name: Hashable, entries: Sequence[Entry], compute: Callable[[Sequence[Entry]], T]) -> T:
        found = self._values.get((name, id(entries)))
        if found is None or found[0] is not entries:
            found = (entries, compute(entries))
            self._values[(name, id(entries))] = found
        return found[1]


@dataclass(frozen=True, slots=True)
class StageContext:
    settings: CompactionSettings
    window: Window
    origins: Origins
    measure: Measure
    message_ids: Sequence[str] | None = None  # per entry of the client's list
    now: float = 0.0
    last_activity: float | None = None
    mark: MicrocompactMark | None = None
    derived: Derived | None = None


@dataclass(frozen=True, slots=True)
class StageResult:
    entries: Entries
    origins: Origins
    report: StageReport
    mark: MicrocompactMark | None = None


def unchanged(name: str, entries: Sequence[Entry], ctx: StageContext) -> StageResult:
    return StageResult(tuple(entries), ctx.origins, StageReport(name), ctx.mark)


def saved(measure: Measure, before: Iterable[Entry], after: Iterable[Entry]) -> int:
    return sum(measure(e) for e in before) - sum(measure(e) for e in after)


def replace_at(name: str, entries: Sequence[Entry], ctx: StageContext,
               changes: Mapping[int, Entry]) -> StageResult:
    """The result of a stage that changed some entries in place (same positions, same origins)."""
    if not changes:
        return unchanged(name, entries, ctx)
    edited = list(entries)
    for i, entry in changes.items():
        edited[i] = entry
    out = tuple(edited)
    tokens = saved(ctx.measure, (entries[i] for i in changes), changes.values())
    return StageResult(out, ctx.origins, StageReport(name, len(changes), tokens), ctx.mark)


def with_key(entry: Entry) -> Entry:
    """A made entry with the cache key of its own bytes, as `Entry` derives it from client bytes."""
    if entry.key is not None:
        return entry
    return replace(entry, key=hashlib.blake2b(entry.to_bytes(), digest_size=16).digest())
