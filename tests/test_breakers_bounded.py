"""The summarizers' breakers are keyed by the summarizer's model, which is the client's own
`model` unless `compaction.summarizer.model` is set: any string a client sends. The states kept
must stay bounded whatever the models; a closed breaker is the default, so it needs no entry."""

from __future__ import annotations

from proxy.compaction import breaker
from proxy.server.breakers import MAX_KEPT, SummarizerBreakers
from proxy.settings_compaction import BreakerSettings


def test_a_breaker_back_to_closed_keeps_no_entry() -> None:
    breakers = SummarizerBreakers(BreakerSettings())
    for n in range(10_000):
        key = breaker.breaker_key(f"client-model-{n}", "fake")
        blocked, trial = breakers.claim(key)
        assert blocked is None
        breakers.settle(key, trial, healthy=n % 2 == 0 or None)
    assert len(breakers._states) == 0


def test_failing_models_beyond_the_bound_forget_the_oldest() -> None:
    breakers = SummarizerBreakers(BreakerSettings(failures=1, base_cooldown_s=60))
    keys = [breaker.breaker_key(f"client-model-{n}", "fake") for n in range(MAX_KEPT + 500)]
    for key in keys:
        _, trial = breakers.claim(key)
        breakers.settle(key, trial, healthy=False)
    assert len(breakers._states) == MAX_KEPT
    assert breakers.blocked(keys[-1]) is not None, "the latest failure still opens its breaker"
    assert breakers.blocked(keys[0]) is None, "the oldest was forgotten"
