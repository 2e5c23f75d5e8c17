"""Responses `reasoning` items and the server ids of what they produced (PROTOCOL.md §2.3).

A reasoning item must sit directly before an item it produced (an assistant message or a
`*_call`). When one is dropped, the `id` of the items that followed it in its turn (`fc_…`,
`msg_…`) goes too, `call_id` stays: an item whose id names a missing reasoning item is
rejected, while an item without an id is always accepted, so removing one too many is harmless. Shared by
repair (reasoning left without its item) and the sanitizer (reasoning dropped by policy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.conversation import Api, Entry, Kind, without_keys


_TURN = (Kind.USER, Kind.INSTRUCTION)


def is_produced(entry: Entry) -> bool:
    """An item a reasoning item can produce: an assistant message or any `*_call` item."""
    if entry.api is not Api.RESPONSES:
        return False
    if entry.kind in (Kind.ASSISTANT, Kind.CALL):
        return True
    type_ = entry.raw.get("type")
    return entry.kind is Kind.OTHER and isinstance(type_, str) and type_.endswith("_call")


def unfollowed_reasoning(entries: Sequence[Entry]) -> set[int]:
    """Reasoning items not directly followed by an item they produced."""
    return {i for i, e in enumerate(entries)
            if e.kind is Kind.REASONING and (i + 1 == len(entries) or not is_produced(entries[i + 1]))}


@dataclass(frozen=True, slots=True)
class Dropped:
    entries: tuple[Entry, ...]
    origins: tuple[int | None, ...]
    reasoning: int
    ids_removed: int


def drop_reasoning(entries: Sequence[Entry], origins: Sequence[int | None],
                   drop: Callable[[int, Entry], bool]) -> Dropped:
    """Remove the reasoning items `drop` picks and the server ids of the items they produced."""
    doomed = {i for i, e in enumerate(entries) if e.kind is Kind.REASONING and drop(i, e)}
    if not doomed:
        return Dropped(tuple(entries), tuple(origins), 0, 0)
    strip = _produced_after(entries, doomed)
    out: list[Entry] = []
    kept_origins: list[int | None] = []
    ids_removed = 0
    for i, entry in enumerate(entries):
        if i in doomed:
            continue
        if i in strip and "id" in entry.raw:
            entry = without_keys(entry, ("id",))
            ids_removed += 1
        out.append(entry)
        kept_origins.append(origins[i])
    return Dropped(tuple(out), tuple(kept_origins), len(doomed), ids_removed)


def _produced_after(entries: Sequence[Entry], doomed: set[int]) -> set[int]:
    """The produced items after a dropped reasoning item, up to the next user or system
    message: its turn. Which of them named it is not known (outputs and other reasoning items
    may sit in between), and removing an id is always accepted, so all of them lose theirs."""
    found: set[int] = set()
    stripping = False
    for j, entry in enumerate(entries):
        if j in doomed:
            stripping = True
        elif entry.kind in _TURN:
            stripping = False
        elif stripping and is_produced(entry):
            found.add(j)
    return found
