"""Microcompact (SPEC §4.3): after a long idle time, old tool results become a clear marker.

When the thread was idle longer than `idle_seconds` (`now` and `last_activity` come in as
arguments), every compactable result outside the protected window (its tool name matches one
of the settings' globs) becomes `CLEARED_TEXT`, except the latest `keep_recent` compactable
results. The prompt cache has expired by then anyway, so changing old entries costs nothing.
A result the marker would not make smaller (by the stage's token measure: "ok", an empty
output) is left as it is: clearing it would grow the prompt and hide a result for nothing.

Sticky: the stage returns a `MicrocompactMark` naming the furthest result it cleared (by the
client's message id, with the index as fallback) for the caller to store. Given a stored
mark, every compactable result up to it stays cleared on later requests, idle or not, so
the projection does not flip back and forth.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from itertools import compress, filterfalse, repeat
from operator import is_not, le

from proxy.conversation import Api, Entry, takes_text_output, with_result_text
from proxy.core.boundary import is_legacy_result
from proxy.core.kinds import CHAT, OTHER, RESULT
from proxy.core.memo import memoized_each
from proxy.core.repair import CANCELLED_TEXT
from proxy.core.stage import StageContext, StageResult, replace_at, with_key
from proxy.records import MicrocompactMark

NAME = "microcompact"
CLEARED_TEXT = "[Old tool result content cleared]"
_CLEARED = ("microcompact.cleared",)


def microcompact(entries: Sequence[Entry], ctx: StageContext) -> StageResult:
    compactable = _compactable(entries, ctx)
    reach = stored_reach(ctx.mark, ctx.message_ids)
    old = ctx.window.touchable_among(compactable)
    targets = set(_reached(old, ctx, reach))
    mark = ctx.mark
    idle = is_idle(ctx)
    fresh: list[int] = []
    if idle:
        keep = ctx.settings.microcompact.keep_recent
        # `[-keep:]`, not `[len - keep:]`: with fewer results than `keep`, that start is
        # negative and would keep only the last few instead of all of them.
        recent = set(compactable[-keep:]) if keep > 0 else set()
        fresh = list(filterfalse(recent.__contains__, old))
        targets.update(fresh)
    ordered = sorted(targets)
    # A result is cleared on every request once it is old: its cleared twin is made once.
    cleared = memoized_each(map(entries.__getitem__, ordered), _CLEARED, _cleared_twin)
    twins = dict(compress(zip(ordered, cleared), map(is_not, cleared, repeat(None))))
    changes = {i: twin for i, twin in twins.items() if ctx.measure(twin) < ctx.measure(entries[i])}
    if idle:
        # Never a mark through a result left as too small: the choice is the same on every
        # request, so it would hold, but a run that cleared nothing new has nothing to store.
        kept_small = twins.keys() - changes.keys()
        mark = _furthest([i for i in fresh if i not in kept_small], ctx, reach) or mark
    result = replace_at(NAME, entries, ctx, changes)
    return StageResult(result.entries, result.origins, result.report, mark)


def _cleared_twin(entry: Entry) -> Entry | None:
    """The result with its output cleared, keyed for the token counter; None if it already is
    or if its output cannot be text."""
    if _cleared(entry) or not takes_text_output(entry):
        return None
    return with_key(with_result_text(entry, CLEARED_TEXT))


def _reached(old: list[int], ctx: StageContext, reach: int | None) -> list[int]:
    """The old results a stored mark reaches (by their place in the client's list)."""
    if reach is None:
        return []
    origins = list(map(ctx.origins.__getitem__, old))
    if None in origins:  # a result the proxy made counts as before every client entry
        return [i for i in old if _origin(ctx, i) <= reach]
    return list(compress(old, map(le, origins, repeat(reach))))


def is_idle(ctx: StageContext) -> bool:
    idle_for = ctx.settings.microcompact.idle_seconds
    return ctx.last_activity is not None and ctx.now - ctx.last_activity > idle_for


def stored_reach(mark: MicrocompactMark | None, message_ids: Sequence[str] | None) -> int | None:
    """The index a stored mark reaches in this list: found by message id, else its index.

    A mark whose message is gone reaches nothing: a compaction summarized it (and every
    result before it), or the client edited it away. Its index counted entries of another
    list, so falling back to it would clear results no idle time ever touched.
    """
    if mark is None:
        return None
    if mark.through_message_id is not None and message_ids is not None:
        for i, message_id in enumerate(message_ids):
            if message_id == mark.through_message_id:
                return i
        return None
    return mark.through_index


def _compactable(entries: Sequence[Entry], ctx: StageContext) -> list[int]:
    """Results whose tool matches the settings' globs, in order (a legacy `role: "function"`
    result by its `name`); never a cancellation notice, which is small and says what happened
    to its call. A result goes by the latest call with its id before it: an id may come back in
    a later turn for another tool."""
    globs = ctx.settings.microcompact.tools
    key = ("microcompact.matches", tuple(globs))
    unknown = _matches("", globs)  # a result whose call is not in the list has no tool name
    matched: dict[str, bool] = {}
    found = []
    for i, entry in enumerate(entries):
        if entry.calls:
            matched.update(_call_matches(entry, key, globs))
        elif (entry.kind is RESULT and matched.get(entry.answers or "", unknown)
              and entry.raw.get("content" if entry.api is CHAT else "output") != CANCELLED_TEXT):
            found.append(i)
        elif (entry.kind is OTHER and is_legacy_result(entry) and _legacy_matches(entry, globs)
              and entry.raw.get("content") != CANCELLED_TEXT):
            found.append(i)  # the deprecated `role: "function"` result, named after its function
    return found


def _legacy_matches(entry: Entry, globs: Sequence[str]) -> bool:
    name = entry.raw.get("name")
    return _matches(name if isinstance(name, str) else "", globs)


def _call_matches(entry: Entry, key: tuple[str, tuple[str, ...]],
                  globs: Sequence[str]) -> tuple[tuple[str, bool], ...]:
    """Per call of the entry, whether its tool matches; memoized, so a steady thread matches
    each call's name against the globs once."""
    found = entry.memo.get(key)
    if found is None:
        found = entry.memo[key] = tuple((c.id, _matches(c.name, globs)) for c in entry.calls)
    return found


def _matches(name: str, globs: Sequence[str]) -> bool:
    return any(g == "*" or fnmatchcase(name, g) for g in globs)


def _origin(ctx: StageContext, index: int) -> int:
    origin = ctx.origins[index]
    return -1 if origin is None else origin


def _cleared(entry: Entry) -> bool:
    body = entry.raw.get("content" if entry.api is Api.CHAT else "output")
    return body == CLEARED_TEXT


def _furthest(cleared: Sequence[int], ctx: StageContext, reach: int | None) -> MicrocompactMark | None:
    if not cleared:
        return None
    through = max(_origin(ctx, i) for i in cleared)
    if through < 0 or (reach is not None and through <= reach):
        return None  # only entries the proxy made: nothing of the client's list to name
    message_id = ctx.message_ids[through] if ctx.message_ids is not None else None
    return MicrocompactMark(message_id, through, ctx.now)
