"""The protected recent window (SPEC §5's kept tail) and what the stages may touch.

The window is the tail of the conversation kept exactly as the client sent it: about
`keep_tokens` tokens (a model profile's `max_input_tokens * keep_ratio`), or the last
`keep_messages` entries without a profile, moved earlier so it never starts inside a tool-call
group. Outside it, the stages still never touch the leading system/developer messages or the
latest user message. `Window` answers "may a stage touch entry i?".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, count, islice, repeat
from operator import gt

from proxy.conversation import Entry, latest_user_index, leading_instructions
from proxy.core.boundary import cut_at_or_before, safe_cuts
from proxy.settings import CompactionSettings, ModelProfile

DEFAULT_KEEP_MESSAGES = 6


@dataclass(frozen=True, slots=True)
class Window:
    lead: int  # entries[:lead] are the leading system/developer messages
    start: int  # entries[start:] are the protected recent window
    latest_user: int | None

    def touchable(self, index: int) -> bool:
        return self.lead <= index < self.start and index != self.latest_user

    def touchable_among(self, indexes: Sequence[int]) -> list[int]:
        """The `touchable` ones of increasing `indexes`, found by bisection."""
        inside = list(indexes[bisect_left(indexes, self.lead):bisect_left(indexes, self.start)])
        if self.latest_user is not None and self.latest_user in inside:
            inside.remove(self.latest_user)
        return inside

    @property
    def outside(self) -> range:
        """The indexes a stage may look at (`touchable` still excludes the latest user message)."""
        return range(self.lead, max(self.lead, self.start))


def keep_for(settings: CompactionSettings, profile: ModelProfile | None) -> tuple[int | None, int | None]:
    """`(keep_tokens, keep_messages)`: a share of the profile's window, else a message count."""
    if profile is None or profile.max_input_tokens is None:
        return None, settings.fallback_keep_messages
    ratio = settings.keep_ratio if profile.keep_ratio is None else profile.keep_ratio
    return int(profile.max_input_tokens * ratio), None


def window_start(entries: Sequence[Entry], sizes: Sequence[int], *, keep_tokens: int | None = None,
                 keep_messages: int | None = None, safe: Sequence[bool] | None = None,
                 step_tokens: int | None = None) -> int:
    """Where the protected window starts: by tokens when `keep_tokens` is given, else by count.

    With `step_tokens`, the start snaps back to the last anchor: the entries where the running
    token total from the list's start passes a multiple of `step_tokens`. Anchors depend only
    on what precedes them, so the start then moves in steps instead of on every request, and
    the projection changes (breaking the prompt cache) less often, for a larger window.
    """
    lead = leading_instructions(entries)
    if keep_tokens is not None:
        start = _start_for_tokens(sizes, keep_tokens, lead)
    else:
        keep = DEFAULT_KEEP_MESSAGES if keep_messages is None else keep_messages
        start = max(lead, len(entries) - keep)
    if step_tokens:
        start = _anchor_at_or_before(sizes, start, step_tokens, lead)
    safe = safe_cuts(entries) if safe is None else safe
    found = cut_at_or_before(safe, start, lead)
    return lead if found is None else found


def _start_for_tokens(sizes: Sequence[int], keep_tokens: int, lead: int) -> int:
    """The earliest start whose tail fits in `keep_tokens`; the last entry is always kept."""
    n = len(sizes)
    if n <= lead:
        return n
    # Summed from the end in C, lazily: the tail grows entry by entry until one does not fit.
    tails = accumulate(islice(reversed(sizes), n - lead))
    over = compress(count(1), map(gt, islice(tails, 1, None), repeat(keep_tokens)))
    return n - next(over, n - lead)


def _anchor_at_or_before(sizes: Sequence[int], start: int, step: int, lead: int) -> int:
    total = sum(sizes[:start])
    for i in range(start, lead, -1):
        before = total - sizes[i - 1]
        if before // step != total // step:
            return i
        total = before
    return lead


def window_of(entries: Sequence[Entry], tail: int) -> Window:
    """The window of a list whose last `tail` entries are protected."""
    lead = leading_instructions(entries)
    return Window(lead, max(lead, len(entries) - tail), latest_user_index(entries))
