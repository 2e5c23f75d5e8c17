"""When to compact: the thresholds of a request and the decision with hysteresis (SPEC §5, §9).

With a model profile the trigger is `max_input_tokens * trigger_ratio` and the kept tail about
`max_input_tokens * keep_ratio` tokens (profile ratios win over the settings). When the profile
also gives a total `context_window`, the request's own output reservation (`max_tokens`,
`max_completion_tokens`, `max_output_tokens`) is taken off the usable input first. Without a
profile: `fallback_trigger_tokens`, and the last `fallback_keep_messages` messages are kept.

Hysteresis: after a compaction, the next one waits until the projection has grown
`rearm_ratio * trigger` beyond the event's `tokens_after`, so an irreducible context near the
trigger does not call the summarizer on every request. It holds only for a checkpoint made
under the same trigger or a lower one: a checkpoint made for a larger window (the thread moved
to a smaller model, or the request reserves more output) kept a larger tail, and a compaction
for this window may well shrink it. One made for a smaller window kept a smaller tail than a
compaction now would, so waiting for growth still holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from proxy.records import CompactionEvent
from proxy.settings import CompactionSettings, ModelProfile

_OUTPUT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_OUTPUT_NAMES = frozenset(_OUTPUT_KEYS)


@dataclass(frozen=True)
class Thresholds:
    trigger: int  # compact when the estimate is above this
    limit: int  # the most the projection may hold (the model's usable input)
    keep_tokens: int | None  # the kept tail by tokens (with a profile) ...
    keep_messages: int | None  # ... or by messages (without one)
    profiled: bool
    reserved_output: int = 0

    def fits(self, estimate: int) -> bool:
        """Whether a projection may go upstream without compaction (breaker open, not re-armed)."""
        return estimate <= self.limit


class Action(StrEnum):
    NONE = "none"  # below the trigger
    COMPACT = "compact"
    HOLD = "hold"  # above the trigger but not re-armed, and it still fits: forward as is
    REFUSE = "refuse"  # not re-armed and it does not fit: the clear error, no summary


# Not frozen: one is built for every request and dropped with it, and a frozen
# `__init__` sets each field through `object.__setattr__`. Never mutated all the same.
@dataclass
class Decision:
    action: Action
    estimate: int
    trigger: int
    rearm_at: int | None = None  # the estimate at which compaction is armed again


def requested_output_tokens(doc: Mapping[str, Any]) -> int:
    """The largest output reservation the request makes, 0 when it makes none."""
    if _OUTPUT_NAMES.isdisjoint(doc):  # the set's method: no `keys()` call to make
        return 0
    largest = 0
    for key in _OUTPUT_KEYS:
        value = doc.get(key)
        # The type checks only for a value that is there.
        if value is not None and isinstance(value, int) and not isinstance(value, bool):
            largest = max(largest, value)
    return largest


def thresholds(settings: CompactionSettings, profile: ModelProfile | None,
               reserved_output: int = 0) -> Thresholds:
    reserved = _reserved(profile, reserved_output)
    window = _usable_input(profile, reserved)
    if window is None:
        trigger = settings.fallback_trigger_tokens
        # Without a known window the trigger is the only number we can trust as a limit.
        return Thresholds(trigger, trigger, None, settings.fallback_keep_messages, False)
    trigger_ratio = _ratio(profile, "trigger_ratio", settings.trigger_ratio)
    keep_ratio = _ratio(profile, "keep_ratio", settings.keep_ratio)
    return Thresholds(max(1, math.floor(window * trigger_ratio)), window,
                      math.floor(window * keep_ratio), None, True, reserved)


def _reserved(profile: ModelProfile | None, reserved_output: int) -> int:
    """The output the request reserves in a total `context_window`; 0 without one, and for a
    reservation that leaves no input at all: that is the request's own error (its `max_tokens`
    alone fills the window), no compaction can make room, and the upstream's refusal names the
    cause, where a compaction's would name an input limit of nothing."""
    window = profile.context_window if profile is not None else None
    return reserved_output if window and reserved_output < window else 0


def _usable_input(profile: ModelProfile | None, reserved: int) -> int | None:
    if profile is None:
        return None
    window = profile.max_input_tokens or profile.context_window
    if window is None:
        return None
    if reserved > 0:  # `_reserved`: only with a context window
        window = min(window, profile.context_window - reserved)  # type: ignore[operator]
    return max(1, window)


def _ratio(profile: ModelProfile | None, name: str, default: float) -> float:
    value = getattr(profile, name, None) if profile is not None else None
    return default if value is None else value


def rearm_at(event: CompactionEvent | None, th: Thresholds, rearm_ratio: float) -> int | None:
    if event is None or event.trigger > th.trigger:
        return None
    return event.tokens_after + math.ceil(rearm_ratio * th.trigger)


def may_act(estimate: int, th: Thresholds, forced: bool = False) -> bool:
    """Whether `decide` can say anything but NONE; False for the usual request, under the
    trigger, which then needs no decision at all."""
    return forced or estimate > th.trigger


def decide(estimate: int, th: Thresholds, event: CompactionEvent | None, rearm_ratio: float,
           *, forced: bool = False) -> Decision:
    """What to do with a projection of `estimate` tokens.

    `event` is the checkpoint that built this projection (None when none applied); `forced`
    is the one compaction an upstream overflow error buys (SPEC §9), hysteresis ignored.
    """
    armed_from = rearm_at(event, th, rearm_ratio)
    if forced:
        return Decision(Action.COMPACT, estimate, th.trigger, armed_from)
    if estimate <= th.trigger:
        return Decision(Action.NONE, estimate, th.trigger, armed_from)
    if armed_from is None or estimate >= armed_from:
        return Decision(Action.COMPACT, estimate, th.trigger, armed_from)
    action = Action.HOLD if th.fits(estimate) else Action.REFUSE
    return Decision(action, estimate, th.trigger, armed_from)
