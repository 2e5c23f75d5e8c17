"""Where to cut: the summarized prefix and the raw tail of one compaction (SPEC §5).

Pass the conversation the client sent (after `manual.strip_exchanges`), one size per entry,
and the previous checkpoint's cut when one applies. The leading system/developer messages are
never summarized. The tail is about `keep_tokens` (or `keep_messages` without a profile); the
cut then moves *later* to the next safe cut (`proxy.core.boundary`), so the tail never exceeds
its budget, never starts with a tool result, never splits a call group and never separates a
reasoning item from what it produced, outputs between them or not (`boundary.summary_cuts`).

Every compaction keeps a minimal tail raw: from the last safe cut at or before the last entry.
That is the pending tool group when the conversation ends inside a tool loop (the model's next
step needs the exact results it just asked for), otherwise the latest message itself.
Strategy `full` keeps exactly that minimal tail; whatever else must survive verbatim (the
latest user message, the user's corrections) comes back through `restore`, which always
carries the latest summarized user message. Keeping the whole current tool loop instead would
defeat `full` for agents that run hundreds of calls after one user message.

The tail is also held to a cap in tokens (`budgets.tail_cap`: what the trigger leaves once the
instructions, tools, summary and restores have their room), by tokens or by messages alike.

Re-compaction never moves the cut backwards: it summarizes the previous summary plus the raw
entries from the previous cut to the new one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.compaction.budgets import TailCap
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Entry, leading_instructions
from proxy.core.boundary import cut_at_or_after, cut_at_or_before, summary_cuts

PARTIAL = "partial"
FULL = "full"


@dataclass(frozen=True)
class Previous:
    """The checkpoint that built the current projection (from `apply.rebuild`)."""

    cut: int
    summary_text: str


@dataclass(frozen=True)
class Cutoff:
    index: int  # the first entry kept raw; len(entries) when none is
    lead: int  # leading system/developer entries, kept as they are
    start: int  # the first entry newly summarized (the previous cut, or `lead`)
    strategy: str
    previous_summary: str | None = None

    @property
    def new_entries(self) -> range:
        return range(self.start, self.index)

    @property
    def summarized(self) -> range:
        """Everything the summary stands for, the previous summary's part included."""
        return range(self.lead, self.index)


def choose_cutoff(entries: Sequence[Entry], sizes: Sequence[int], th: Thresholds,
                  strategy: str = PARTIAL, previous: Previous | None = None,
                  cap: TailCap | None = None) -> Cutoff | None:
    """The cut, or None when there is nothing new to summarize. `cap` (`budgets.tail_cap`)
    bounds the kept tail's tokens beside the keep budget; never below the minimal tail."""
    n = len(entries)
    lead = leading_instructions(entries)
    start = max(lead, previous.cut if previous is not None else lead)
    flags = summary_cuts(entries)
    minimal = cut_at_or_before(flags, n - 1, start + 1) if n > start + 1 else None
    if minimal is None:
        return None
    cut = minimal if strategy == FULL else _partial_cut(flags, sizes, th, lead, minimal, cap)
    if cut <= start:
        return None
    return Cutoff(cut, lead, start, strategy,
                  previous.summary_text if previous is not None else None)


def _partial_cut(flags: Sequence[bool], sizes: Sequence[int], th: Thresholds, lead: int,
                 minimal: int, cap: TailCap | None) -> int:
    wanted = _budget_start(sizes, th, lead, cap)
    snapped = cut_at_or_after(flags, wanted)
    return minimal if snapped is None else min(snapped, minimal)


def _budget_start(sizes: Sequence[int], th: Thresholds, lead: int, cap: TailCap | None) -> int:
    """The earliest index whose tail fits the keep budget and the cap."""
    n = len(sizes)
    earliest = lead if th.keep_tokens is not None else max(lead, n - (th.keep_messages or 0))
    if th.keep_tokens is None and cap is None:
        return earliest
    keep = th.keep_tokens if th.keep_tokens is not None else math.inf
    tail, i = 0, n
    while i > earliest and tail + sizes[i - 1] <= min(keep, cap.at(i - 1) if cap else keep):
        tail += sizes[i - 1]
        i -= 1
    return i
