"""A compaction's pure preparation, in a worker thread: the cutoff, the restores and the
summarizer's plan (its transcript rendered and chunked).

On a 2,000-message thread that is tens of ms of CPU, which on the event loop held every other
request and stream. The thread touches nothing the loop shares: it counts with an estimator of
its own (its caches empty; a count is a function of the bytes alone, so the same numbers come
out) over copies of the entries, each with its own copy of the counts already cached on it.
What it returns is new values the loop takes over once it has ended.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.compaction import restore
from proxy.compaction.budgets import TailCap
from proxy.compaction.cutoff import Cutoff, Previous, choose_cutoff
from proxy.compaction.summarizer import SummaryPlan
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Entry
from proxy.settings import RestoreSettings, TokenSettings
from proxy.tokens.estimate import TokenEstimator

# The private estimator lives for one preparation: its entry cache holds the few entries the
# sanitizer and repair remade; the client's entries carry their counts.
_PRIVATE_ENTRIES = 4096

Plan = Callable[[Sequence[Entry], Cutoff, TokenEstimator], SummaryPlan]


@dataclass(frozen=True)
class SummaryPrep:
    cutoff: Cutoff | None  # None: nothing to compact (and nothing else was prepared)
    restored: restore.Restored | None = None
    plan: SummaryPlan | None = None


@dataclass(frozen=True)
class PrepInputs:
    """Everything the preparation reads, made on the loop: private copies and plain values."""

    entries: list[Entry]
    estimator: TokenEstimator
    sizes: Sequence[int]
    thresholds: Thresholds
    strategy: str
    previous: Previous | None
    cap: TailCap
    budgets: RestoreSettings


def private_inputs(entries: Sequence[Entry], estimator: TokenEstimator, sizes: Sequence[int],
                   thresholds: Thresholds, strategy: str, previous: Previous | None,
                   cap: TailCap, budgets: RestoreSettings) -> PrepInputs:
    """Run on the loop: the copies the thread works on."""
    own = TokenEstimator(estimator.tokenizer,
                         TokenSettings(safety_margin=estimator.margin,
                                       cache_entries=_PRIVATE_ENTRIES), estimator.images)
    return PrepInputs([_twin(e) for e in entries], own, tuple(sizes), thresholds, strategy,
                      previous, cap, budgets)


def prepare(inputs: PrepInputs, plan: Plan) -> SummaryPrep:
    """Run in the worker thread: what `Compactor.compact` did before its first await."""
    entries, estimator = inputs.entries, inputs.estimator
    cutoff = choose_cutoff(entries, inputs.sizes, inputs.thresholds, inputs.strategy,
                           inputs.previous, cap=inputs.cap)
    if cutoff is None:
        return SummaryPrep(None)
    restored = restore.collect(entries, cutoff, inputs.budgets, estimator.text_tokens,
                               measure=estimator.entry_tokens)
    return SummaryPrep(cutoff, restored, plan(entries, cutoff, estimator))


def _twin(entry: Entry) -> Entry:
    """The entry with a memo of its own: the thread's counts land there, not on the loop's."""
    twin = copy.copy(entry)
    object.__setattr__(twin, "memo", dict(entry.memo))
    return twin
