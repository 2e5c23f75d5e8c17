"""The cheap cascade run before every upstream call: the stage order is `STAGES`, read it first.

Repair makes the tool structure valid over the whole list (the window included: an invalid
list fails upstream wherever the fault is). The protected window is then measured on the
repaired list, once, and the cheap stages run outside it; each is switchable in settings.
Last, the sanitizer applies the policy that fits what happened (`policy_for`); a call that
shared its output with a server item the sanitizer took out gets a cancelled one
(`shared_outputs`), counted in its report. Entries no stage changed come out as the very same
objects, so they go upstream as the client's bytes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, count, repeat
from operator import attrgetter, contains, is_not
from typing import Any

from proxy.conversation import Entries, Entry, Kind, leading_instructions
from proxy.core.boundary import safe_cuts
from proxy.core.collapse import collapse, settled_start
from proxy.core.microcompact import microcompact
from proxy.core.repair import repair
from proxy.core.sanitize import Policy, Sanitized, counts, policy_for, sanitize
from proxy.core.shared_outputs import answer_left_calls
from proxy.core.stage import (Derived, Measure, Origins, StageContext, StageReport, StageResult,
                              with_key)
from proxy.core.truncate import truncate
from proxy.core.window import Window, window_of, window_start
from proxy.records import MicrocompactMark
from proxy.settings import CompactionSettings


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    run: Callable[[Entries, StageContext], StageResult]
    enabled: Callable[[CompactionSettings], bool]
    needs_window: bool = True


def run_repair(entries: Entries, ctx: StageContext) -> StageResult:
    done = repair(entries)
    if done.entries is entries:
        return StageResult(entries, ctx.origins, StageReport("repair"), ctx.mark)
    origins = tuple(None if o is None else ctx.origins[o] for o in done.origins)
    tokens = replaced_tokens(ctx.measure, entries, done.entries)
    return StageResult(done.entries, origins, StageReport("repair", done.changed, tokens), ctx.mark)


STAGES: tuple[Stage, ...] = (
    Stage("repair", run_repair, lambda s: True, needs_window=False),
    Stage("collapse", collapse, lambda s: s.collapse.enabled),
    Stage("truncate", truncate, lambda s: s.truncate.enabled),
    Stage("microcompact", microcompact, lambda s: s.microcompact.enabled),
)


@dataclass(frozen=True)
class CascadeContext:
    settings: CompactionSettings
    measure: Measure  # token count of one entry
    sizes: Sequence[int] | None = None  # per client entry, when already counted
    keep_tokens: int | None = None  # a profile's max_input_tokens * keep_ratio
    keep_messages: int | None = None  # without a profile (default: settings' fallback)
    window_step: int | None = None  # snap the window start to every N tokens (fewer cache breaks)
    message_ids: Sequence[str] | None = None  # per client entry
    now: float = 0.0
    last_activity: float | None = None
    mark: MicrocompactMark | None = None  # the stored microcompact mark
    compacted: bool = False  # an LLM summary is in the projection
    keep_loop: bool = False  # the retry after an upstream missed a thinking block
    policy: Policy | None = None  # force a sanitizer policy


# Not frozen: one is built for every request and dropped with it, and a frozen
# `__init__` sets each field through `object.__setattr__`. Never mutated all the same.
@dataclass
class CascadeResult:
    entries: Entries
    origins: Origins  # per entry: its index in the client's list; None when the proxy made it
    reports: tuple[StageReport, ...]  # the stages that ran, in order, then "sanitize"
    sanitizer: Sanitized | None  # None when no stage ran (`unchanged`): see `sanitized`
    mark: MicrocompactMark | None  # the microcompact mark to store
    window_start: int  # entries[window_start:] are the protected window
    changed: bool

    @property
    def sanitized(self) -> Sanitized:
        """What the sanitizer did; for an inert list, made on demand (the log line and the
        hot path never ask): the list as it came, under the transparent policy."""
        if self.sanitizer is None:
            return Sanitized(self.entries, self.origins, Policy.TRANSPARENT)  # type: ignore[arg-type]
        return self.sanitizer

    @property
    def tokens_saved(self) -> int:
        return sum(r.tokens_saved for r in self.reports)

    def summary(self) -> dict[str, Any]:
        """What the cascade did, as plain data for the request's log line."""
        stages = {r.name: {"changed": r.changed, "tokens_saved": r.tokens_saved} for r in self.reports}
        return {"stages": stages, "policy": self.sanitized.policy.value,
                "private_removed": dict(counts(self.sanitized)),
                "stand_ins": self.sanitized.stand_ins, "window_start": self.window_start,
                "changed": self.changed}


@dataclass(frozen=True, slots=True)
class _Frame:
    entries: Entries
    origins: Origins
    tail: int | None = None  # how many entries at the end are protected, once measured


def run_cascade(entries: Sequence[Entry], context: CascadeContext, *,
                stages: Sequence[Stage] = STAGES) -> CascadeResult:
    """Repair, the cheap stages and the sanitizer; `stages` is for tests and benchmarks."""
    client = tuple(entries)
    if inert(client, compacted=context.compacted, policy=context.policy,
             keep_loop=context.keep_loop):
        return unchanged(client, context.mark)
    memo = _Memo(context, client)
    measure = memo.measure
    derived = Derived()
    frame = _Frame(client, tuple(range(len(client))))
    reports: list[StageReport] = []
    mark = context.mark
    for stage in stages:
        if not stage.enabled(context.settings):
            continue
        if stage.needs_window and frame.tail is None:
            frame = _measured(frame, context, memo, derived)
        if stage.needs_window and _all_protected(frame):
            continue  # the window covers the whole list: the cheap stages have nothing to touch
        result = stage.run(frame.entries, _stage_context(frame, context, measure, mark, derived))
        frame = _Frame(result.entries, result.origins, frame.tail)
        reports.append(result.report)
        mark = result.mark
    if frame.tail is None:
        frame = _measured(frame, context, memo, derived)
    return _sanitized(frame, client, context, memo, tuple(reports), mark)


_INERT_KINDS = frozenset({Kind.INSTRUCTION, Kind.USER, Kind.ASSISTANT})
_KIND, _CALLS, _KEY = attrgetter("kind"), attrgetter("calls"), attrgetter("key")
_RAW = attrgetter("raw")


def inert(entries: Entries, *, compacted: bool, policy: Policy | None, keep_loop: bool) -> bool:
    """Nothing any stage could touch: no tool traffic, no reasoning items, nothing compacted.

    Repair, collapse, truncate and microcompact all work on calls and results; the sanitizer
    only acts on a projection something else changed (or on a forced policy). A plain chat
    therefore comes out as it went in, and a hot path can say so without walking the stages
    (or building their context).
    """
    if compacted or policy is not None or keep_loop:
        return False
    # Read with `map`: no Python step per entry. A legacy `function_call` is a call that leaves
    # its message an ASSISTANT without `calls`: unanswered, nothing else shows it.
    return (_INERT_KINDS.issuperset(map(_KIND, entries)) and not any(map(_CALLS, entries))
            and not any(map(contains, map(_RAW, entries), repeat("function_call"))))


def unchanged(entries: Entries, mark: MicrocompactMark | None) -> CascadeResult:
    """The cascade's result for `inert` entries: the list as it came, `mark` kept."""
    kept = tuple(range(len(entries)))
    return CascadeResult(entries, kept, (), None, mark, leading_instructions(entries), False)


def _sanitized(frame: _Frame, client: Entries, context: CascadeContext, memo: _Memo,
               reports: tuple[StageReport, ...], mark: MicrocompactMark | None) -> CascadeResult:
    changed = any(r.changed for r in reports)
    policy = context.policy or policy_for(compacted=context.compacted, changed=changed,
                                          keep_loop=context.keep_loop)
    clean = sanitize(frame.entries, policy, changed_at=first_difference(client, frame.entries))
    if clean.items_dropped:  # a call may have shared an output that went with a server item
        entries, placed, made = answer_left_calls(frame.entries, clean.entries, clean.kept)
    else:
        entries, placed, made = clean.entries, clean.kept, 0
    tokens = replaced_tokens(memo.measure, frame.entries, entries)
    report = StageReport("sanitize", clean.changed + made, tokens)
    protected_from = len(frame.entries) - (frame.tail or 0)
    if made:
        # A made output ends its step, which the window never splits: it is on its step's side.
        start = next((p for p, i in enumerate(placed) if i is not None and i >= protected_from),
                     len(placed))
        origins = tuple(None if i is None else frame.origins[i] for i in placed)
    else:
        start = bisect_left(clean.kept, protected_from)  # `kept` is increasing
        origins = (frame.origins if len(clean.kept) == len(frame.entries)  # nothing dropped
                   else tuple(frame.origins[i] for i in clean.kept))
    if None in map(_KEY, entries):
        entries = tuple(memo.keyed(e) for e in entries)
    return CascadeResult(entries, origins, (*reports, report), clean, mark, start,
                         changed or report.changed > 0)


def _stage_context(frame: _Frame, context: CascadeContext, measure: Measure,
                   mark: MicrocompactMark | None, derived: Derived) -> StageContext:
    window = Window(0, 0, None) if frame.tail is None else window_of(frame.entries, frame.tail)
    return StageContext(context.settings, window, frame.origins, measure, context.message_ids,
                        context.now, context.last_activity, mark, derived)


def _all_protected(frame: _Frame) -> bool:
    return frame.tail is not None and frame.tail >= len(frame.entries) - leading_instructions(frame.entries)


def _measured(frame: _Frame, context: CascadeContext, memo: _Memo, derived: Derived) -> _Frame:
    entries = frame.entries
    keep_messages = context.keep_messages
    if context.keep_tokens is None and keep_messages is None:
        keep_messages = context.settings.fallback_keep_messages
    lead = leading_instructions(entries)
    if context.keep_tokens is None and keep_messages is not None and len(entries) - lead <= keep_messages:
        return _Frame(entries, frame.origins, len(entries) - lead)  # short: all protected
    sizes = memo.sizes(entries)
    if context.keep_tokens is not None and sum(sizes[lead:]) <= context.keep_tokens:
        return _Frame(entries, frame.origins, len(entries) - lead)
    safe = safe_cuts(entries)
    start = window_start(entries, sizes, keep_tokens=context.keep_tokens,
                         keep_messages=keep_messages, safe=safe, step_tokens=context.window_step)
    if context.settings.collapse.enabled:
        lead = window_of(entries, 0).lead
        explore = context.settings.collapse
        start = settled_start(entries, start, explore.tools, safe, lead, derived, explore.shell_tools)
    return _Frame(entries, frame.origins, len(entries) - start)


class _Memo:
    """`context.measure`, remembered per entry object for this run, seeded with known sizes.

    An entry a stage made has no client bytes, hence no cache key; it is measured as a twin
    keyed by the digest of its own bytes (`with_key`), so the token counter's cache serves the
    same made entry on the next request, and the output carries the keyed twin.
    """

    def __init__(self, context: CascadeContext, client: Entries) -> None:
        self._count = context.measure
        self._sizes: dict[int, int] = {}
        self._twins: dict[int, Entry] = {}
        self._alive: list[Entry] = list(client)  # ids stay unique while the run lasts
        if context.sizes is not None:
            self._sizes.update(zip(map(id, client), context.sizes, strict=True))

    def sizes(self, entries: Entries) -> list[int]:
        out = list(map(self._sizes.get, map(id, entries)))  # no Python step per entry
        if None in out:
            out = [size if size is not None else self.measure(e) for size, e in zip(out, entries)]
        return out  # type: ignore[return-value]

    def measure(self, entry: Entry) -> int:
        found = self._sizes.get(id(entry))
        if found is None:
            found = self._count(entry if entry.key is not None else self.keyed(entry))
            self._sizes[id(entry)] = found
        return found

    def keyed(self, entry: Entry) -> Entry:
        if entry.key is not None:
            return entry
        twin = self._twins.get(id(entry))
        if twin is None:
            twin = with_key(entry)
            self._twins[id(entry)] = twin
            self._alive.append(entry)
        return twin


def replaced_tokens(measure: Measure, before: Sequence[Entry], after: Sequence[Entry]) -> int:
    """Tokens of the entries that left minus tokens of the entries that came (by identity)."""
    if before is after:
        return 0
    before_ids = {id(e) for e in before}
    after_ids = {id(e) for e in after}
    gone = sum(measure(e) for e in before if id(e) not in after_ids)
    came = sum(measure(e) for e in after if id(e) not in before_ids)
    return gone - came


def first_difference(client: Sequence[Entry], projection: Sequence[Entry]) -> int | None:
    """The first index where the projection stops being the client's list; None if it is."""
    # Compared in C: the projection is mostly the client's very entries, hundreds of them.
    differs = next(compress(count(), map(is_not, client, projection)), None)
    if differs is not None:
        return differs
    if len(client) == len(projection):
        return None
    return min(len(client), len(projection))
