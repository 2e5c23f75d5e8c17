"""The summarizers' circuit breakers (SPEC §9), one per summarizer model and upstream: the state
machine is pure (`compaction/breaker.py`); this keeps each breaker's state, read on the clock.

`clock` is looked up at every call (monotonic seconds), so a test can move it instead of
sleeping through cooldowns.
"""

from __future__ import annotations

import time
from collections import Counter

from proxy.compaction import breaker
from proxy.settings_compaction import BreakerSettings

clock = time.monotonic

# The summarizer's model is the client's own unless configured: any string. Breakers that
# failed are kept up to this many (the oldest forgotten: its model may try again at once).
MAX_KEPT = 4096


class SummarizerBreakers:
    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self._states: dict[breaker.BreakerKey, breaker.BreakerState] = {}

    def reconfigured(self, settings: BreakerSettings) -> SummarizerBreakers:
        """The same breakers' states under a reloaded config's `settings` (a failing summarizer
        does not get a fresh start from a reload); this object keeps its own, for the
        compactions under way."""
        again = SummarizerBreakers(settings)
        again._states = self._states
        return again

    def blocked(self, key: breaker.BreakerKey) -> breaker.Blocked | None:
        """None when a summary may be tried now; else how long to wait, and why. Only looks."""
        return breaker.blocked(self._states.get(key, breaker.CLOSED), clock())

    def claim(self, key: breaker.BreakerKey) -> tuple[breaker.Blocked | None, float | None]:
        """Let the breaker decide on an attempt: what blocks it, or (when it is the half-open
        trial) the trial's stamp."""
        state = self._states.get(key, breaker.CLOSED)
        now = clock()
        found = breaker.blocked(state, now)
        if found is not None:
            return found, None
        claimed = breaker.allow(state, now)[1]
        self._keep(key, claimed)
        return None, claimed.trial_started_at

    def settle(self, key: breaker.BreakerKey, trial: float | None, healthy: bool | None) -> None:
        """`healthy`: the summarizer worked and its summary was kept (True), it failed or the
        checkpoint could not be kept (False), or no verdict (None: cancelled, a bug, or a
        failure that is the client's, `client_owned.summarizer_verdict`)."""
        state = self._states.get(key, breaker.CLOSED)
        if healthy is None:
            state = breaker.abandon(state, trial)
        elif healthy:
            state = breaker.record_success(state)
        else:
            state = breaker.record_failure(state, clock(), self.settings,
                                           trial_started_at=trial)
        self._keep(key, state)

    def _keep(self, key: breaker.BreakerKey, state: breaker.BreakerState) -> None:
        # A closed breaker is what a missing entry reads as: only the others take room.
        if state == breaker.CLOSED:
            self._states.pop(key, None)
            return
        if key not in self._states and len(self._states) >= MAX_KEPT:
            del self._states[next(iter(self._states))]
        self._states[key] = state

    def not_closed(self) -> Counter[tuple[str, str]]:
        """How many breakers are open or half-open now, by (upstream, status): for the
        metrics, read when scraped."""
        now = clock()
        statuses = ((upstream, breaker.status(state, now))
                    for (upstream, _), state in self._states.items())
        return Counter((upstream, status.value) for upstream, status in statuses
                       if status is not breaker.Status.CLOSED)
