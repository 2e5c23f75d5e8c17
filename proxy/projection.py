"""The projection of one request: checkpoint rebuilt, cheap cascade run, size estimated.

Pure sequencing of the core (no I/O, no clock): `view_of` turns the client's list into the
command-free list the checkpoints refer to; `build` applies the thread's latest checkpoint
(when it still fits this list), runs the cascade and estimates the result against the usage
anchors. The server calls it before every upstream call, and again after a compaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy import anchors
from proxy.anchors import NO_SIZES, ReferenceSizes
from proxy.compaction import apply, manual
from proxy.compaction.apply import Rebuilt
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Entries
from proxy.core.cascade import CascadeContext, CascadeResult, inert, run_cascade, unchanged
from proxy.core.sanitize import Policy
from proxy.identity import Identities
from proxy.records import Anchor, CompactionEvent, MicrocompactMark
from proxy.settings import CompactionSettings
from proxy.tokens.estimate import TokenEstimator


@dataclass
class View:
    """The client's conversation with `/compact` exchanges taken out (SPEC §8)."""

    entries: Entries
    identities: Identities
    tools: Any = None
    instructions: Any = None
    context: bytes = b""
    # Legacy `functions` and a response schema (`rules.request_definitions`); None on most.
    definitions: Any = None
    _ids: list[str] | None = field(default=None, repr=False)

    @property
    def ids(self) -> list[str]:
        if self._ids is None:
            self._ids = self.identities.ids(self.entries)
        return self._ids


def view_of(entries: Entries, identities: Identities, command: str | None, *, tools: Any = None,
            instructions: Any = None, context: bytes = b"", definitions: Any = None) -> View:
    view = View(entries, identities, tools, instructions, context, definitions)
    if command and manual.mentioned(entries, command):
        stripped, ids = manual.strip_exchanges(entries, view.ids, command)
        view = View(stripped, identities, tools, instructions, context, definitions, ids)
    return view


# Not frozen: one is built for every request and dropped with it, and a frozen
# `__init__` sets each field through `object.__setattr__`. Never mutated all the same.
@dataclass
class Built:
    rebuilt: Rebuilt | None
    cascade: CascadeResult
    tokens: int
    anchor: Anchor | None
    # The thread's checkpoint no longer applies: the client changed the part it summarizes
    # (an edit, a branch, its own trimming of old messages), so a compaction starts afresh.
    stale: bool = False
    # Of `tokens`, the guesses for `item_reference`s to items the proxy never relayed
    # (`anchors.AnchoredEstimate.guessed`): a request only they put over the limit goes up.
    guessed: int = 0

    @property
    def projection(self) -> Entries:
        return self.cascade.entries

    @property
    def event(self) -> CompactionEvent | None:
        return self.rebuilt.event if self.rebuilt else None

    @property
    def protected(self) -> int:
        """How many entries at the projection's end are the client's, inside the protected
        window. The summary and restore messages are not counted even when the window covers
        them (a short tail after a compaction): they stay byte-identical until the next
        compaction, so prefix-stability checks must treat them as part of the stable head."""
        cascade = self.cascade
        start = cascade.window_start
        if self.rebuilt is not None:
            head, origins = self.rebuilt.head, cascade.origins
            while start < len(origins) and origins[start] is not None and origins[start] < head:
                start += 1
        return len(cascade.entries) - start


# Not frozen: one is built for every request and dropped with it, and a frozen
# `__init__` sets each field through `object.__setattr__`. Never mutated all the same.
@dataclass
class Situation:
    """What the cascade needs to know about the thread and the moment."""

    settings: CompactionSettings
    estimator: TokenEstimator
    identities: Identities
    thresholds: Thresholds
    now: float = 0.0
    last_activity: float | None = None
    mark: MicrocompactMark | None = None
    anchors: tuple[Anchor, ...] = ()
    policy: Policy | None = None
    keep_loop: bool = False
    # What the items the tenant's `item_reference`s name count (`proxy.item_sizes`).
    references: ReferenceSizes = NO_SIZES


def build(view: View, event: CompactionEvent | None, situation: Situation) -> Built:
    rebuilt = apply.rebuild(view.entries, view.ids, event) if event is not None else None
    base = rebuilt.projection if rebuilt is not None else view.entries
    sizes = situation.estimator.sizes(base)
    cascade = cascade_of(base, situation, compacted=rebuilt is not None, sizes=sizes)
    # The cascade usually hands back the very list it got: then its sizes are known already.
    found = estimate(cascade.entries, view, situation, sizes if cascade.entries is base else None)
    return Built(rebuilt, cascade, found.tokens, found.anchor,
                 event is not None and rebuilt is None, found.guessed)


def cascade_of(entries: Entries, situation: Situation, *, compacted: bool,
               sizes: list[int] | None = None) -> CascadeResult:
    """`sizes`: the entries' token counts, when the caller has them. The cascade's window is
    placed by them with each reference weighed as its item (`anchors.with_references`)."""
    if inert(entries, compacted=compacted, policy=situation.policy,
             keep_loop=situation.keep_loop):
        return unchanged(tuple(entries), situation.mark)
    th = situation.thresholds
    step = int(th.limit * situation.settings.window_step_ratio) or None
    # Positional, in the fields' order: a class called with keywords has them packed into a
    # dict and out again, about 500 instructions each (callgrind), on most agents' requests.
    context = CascadeContext(
        situation.settings, situation.estimator.entry_tokens,  # settings, measure
        anchors.with_references(entries, situation.estimator.sizes(entries) if sizes is None
                                else sizes, situation.anchors, situation.references),
        th.keep_tokens, th.keep_messages, step,  # keep_tokens, keep_messages, window_step
        LazyIds(situation.identities, entries), situation.now,  # message_ids, now
        situation.last_activity, situation.mark, compacted,
        situation.keep_loop, situation.policy)
    return run_cascade(entries, context)


def estimate(projection: Entries, view: View, situation: Situation,
             sizes: list[int] | None = None) -> anchors.AnchoredEstimate:
    estimator = situation.estimator
    if sizes is None:
        sizes = estimator.sizes(projection)
    conservative = estimator.conservative_total(projection, view.tools, view.instructions, sizes,
                                                view.definitions)
    return anchors.estimate(projection, sizes, view.context, situation.anchors, conservative,
                            situation.identities.content_digest, estimator.margin,
                            situation.references)


def measure_projection(view: View, situation: Situation):  # type: ignore[no-untyped-def]
    """How `apply.finish` measures a candidate projection: cascade, then the whole estimate,
    the request's own (`estimate`): an `item_reference` counts as the item it stands for (its
    recorded size, else its answer's anchor, else the guess of `anchors.estimate`), not as its
    few tokens of JSON."""
    def measure(projection: Entries) -> int:
        entries = cascade_of(projection, situation, compacted=True).entries
        return estimate(entries, view, situation).tokens
    return measure


class LazyIds:
    """Message ids computed on first use: most requests never need them."""

    def __init__(self, identities: Identities, entries: Entries) -> None:
        self._identities = identities
        self._entries = entries
        self._ids: list[str] | None = None

    def _all(self) -> list[str]:
        if self._ids is None:
            self._ids = self._identities.ids(self._entries)
        return self._ids

    def __getitem__(self, index: int) -> str:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Any:
        return iter(self._all())
