"""A circuit breaker per summarizer (model + upstream), as a pure state machine (SPEC §9).

closed --`failures` consecutive failures--> open (cooldown = base * 2**(trips - 1), capped)
open --cooldown elapsed, `allow`--> half-open: exactly one trial summary may run
half-open --success--> closed (counters reset) | --the trial's failure--> open, the cooldown
doubled (any other failure while open, reported late or by an attempt that bypassed the
breaker, changes nothing)

`now` is passed in (seconds, any monotonic clock). Every trial is settled: a success, a failure,
or `abandon` (its request was cancelled, or it ended before asking the summarizer), after which
the next request may try at once. A trial that never reports back all the same (a bug) stops
blocking after `trial_timeout_s`, so the breaker cannot stay half-open forever. The server
keeps one `BreakerState` per `breaker_key` and replaces it with what these functions return.
`blocked` says, for a refused request, how long to wait and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from proxy.settings import BreakerSettings
from proxy.store.keys import kept_name


class Status(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerState:
    failures: int = 0  # consecutive failures while closed
    trips: int = 0  # times opened since the last success
    opened_at: float | None = None
    cooldown_s: float = 0.0
    trial_started_at: float | None = None  # a half-open trial is running


CLOSED = BreakerState()


@dataclass(frozen=True)
class Blocked:
    """Why no summary may be attempted now, and for how long (SPEC §9)."""

    wait_s: float  # the cooldown left; while a trial runs, the wait is unknown: a guess
    reason: str

    @property
    def retry_after(self) -> int:
        """Whole seconds for a `Retry-After` header: never 0, which would invite a busy loop."""
        return max(1, math.ceil(self.wait_s))


# While a trial runs its outcome is unknown; a short wait lets a client see it soon.
_TRIAL_WAIT_S = 1.0


BreakerKey = tuple[str, str]  # (upstream name, summarizer model)


def breaker_key(model: str, upstream: str) -> BreakerKey:
    # A pair, not a joined string: the model is any client's text, and the metrics read the
    # upstream back out of the key. A model name of any length is kept bounded.
    return upstream, kept_name(model)


def status(state: BreakerState, now: float) -> Status:
    if state.opened_at is None:
        return Status.CLOSED
    if state.trial_started_at is not None or now >= state.opened_at + state.cooldown_s:
        return Status.HALF_OPEN
    return Status.OPEN


def allow(state: BreakerState, now: float,
          trial_timeout_s: float = 300.0) -> tuple[bool, BreakerState]:
    """Whether a summary may be attempted now, and the state to keep (a trial is recorded)."""
    if state.opened_at is None:
        return True, state
    if now < state.opened_at + state.cooldown_s:
        return False, state
    trial = state.trial_started_at
    if trial is not None and now < trial + trial_timeout_s:
        return False, state
    return True, replace(state, trial_started_at=now)


def blocked(state: BreakerState, now: float, trial_timeout_s: float = 300.0) -> Blocked | None:
    """None when `allow` would let a summary run now; else the wait and its reason."""
    if allow(state, now, trial_timeout_s)[0]:
        return None
    wait = retry_after(state, now)
    if wait > 0:
        return Blocked(wait, f"the summarizer's circuit breaker is open for another "
                             f"{math.ceil(wait)}s after repeated failures")
    return Blocked(_TRIAL_WAIT_S, "the summarizer failed repeatedly and a trial summary is "
                                  "running now")


def abandon(state: BreakerState, trial_started_at: float | None) -> BreakerState:
    """An attempt that ended without a verdict on the summarizer: if it was the running trial,
    the next request may try at once (no cooldown: nothing new was learnt)."""
    if trial_started_at is None or state.trial_started_at != trial_started_at:
        return state
    return replace(state, trial_started_at=None)


def record_success(state: BreakerState) -> BreakerState:
    return CLOSED


def record_failure(state: BreakerState, now: float, settings: BreakerSettings, *,
                   trial_started_at: float | None) -> BreakerState:
    """A failed attempt; `trial_started_at`: its stamp from `allow` when it was the trial, else
    None."""
    if state.opened_at is not None:
        # Only the running trial's failure is news. Any other is a late report from an attempt
        # begun before the breaker opened, or from one that bypassed it (an upstream overflow):
        # taken for the trial's, it would free the trial's slot while the trial still runs.
        if state.trial_started_at is None or trial_started_at != state.trial_started_at:
            return state
        return _open(state.trips + 1, now, settings)
    failures = state.failures + 1
    if failures >= settings.failures:
        return _open(1, now, settings)
    return replace(state, failures=failures)


def _open(trips: int, now: float, settings: BreakerSettings) -> BreakerState:
    cooldown = min(settings.max_cooldown_s, settings.base_cooldown_s * 2.0 ** min(trips - 1, 60))
    return BreakerState(failures=0, trips=trips, opened_at=now, cooldown_s=cooldown)


def retry_after(state: BreakerState, now: float) -> float:
    """Seconds until a trial may run (0 when one may run now)."""
    if state.opened_at is None:
        return 0.0
    return max(0.0, state.opened_at + state.cooldown_s - now)
