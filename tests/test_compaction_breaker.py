from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.breaker import (CLOSED, BreakerState, Status, abandon, allow, blocked,
                                      breaker_key, record_failure, record_success, retry_after,
                                      status)
from proxy.settings import BreakerSettings

SETTINGS = BreakerSettings(failures=3, base_cooldown_s=60.0, max_cooldown_s=200.0)


def fail(state: BreakerState, now: float) -> BreakerState:
    """The failure of the running trial, if one runs (of an attempt begun while closed if not)."""
    return record_failure(state, now, SETTINGS, trial_started_at=state.trial_started_at)


def test_opens_after_consecutive_failures() -> None:
    state = fail(fail(CLOSED, 0), 1)
    assert status(state, 1) is Status.CLOSED and allow(state, 1)[0]
    state = fail(state, 2)
    assert status(state, 2) is Status.OPEN and not allow(state, 30)[0]
    assert retry_after(state, 32) == 30.0


def test_success_resets_the_count() -> None:
    state = record_success(fail(fail(CLOSED, 0), 1))
    assert fail(state, 2) == BreakerState(failures=1)


def test_half_open_allows_one_trial_then_closes_on_success() -> None:
    state = fail(fail(fail(CLOSED, 0), 0), 0)
    allowed, trial = allow(state, 60)
    assert allowed and status(trial, 60) is Status.HALF_OPEN
    assert not allow(trial, 61)[0]  # only one trial at a time
    assert record_success(trial) == CLOSED


def test_failed_trial_doubles_the_cooldown_up_to_the_cap() -> None:
    state = fail(fail(fail(CLOSED, 0), 0), 0)
    cooldowns = [state.cooldown_s]
    now = 0.0
    for _ in range(4):
        now = state.opened_at + state.cooldown_s
        allowed, state = allow(state, now)
        assert allowed
        state = fail(state, now)
        cooldowns.append(state.cooldown_s)
    assert cooldowns == [60.0, 120.0, 200.0, 200.0, 200.0]


def test_a_lost_trial_stops_blocking_after_its_timeout() -> None:
    state = fail(fail(fail(CLOSED, 0), 0), 0)
    _, trial = allow(state, 60, trial_timeout_s=10)
    assert not allow(trial, 69, trial_timeout_s=10)[0]
    assert allow(trial, 70, trial_timeout_s=10)[0]


def test_late_failure_while_open_without_trial_changes_nothing() -> None:
    state = fail(fail(fail(CLOSED, 0), 0), 0)
    assert fail(state, 5) == state


def test_an_abandoned_trial_lets_the_next_request_try_at_once() -> None:
    state = fail(fail(fail(CLOSED, 0), 0), 0)
    _, trial = allow(state, 60)
    assert not allow(trial, 61)[0]
    freed = abandon(trial, trial.trial_started_at)
    assert allow(freed, 61)[0] and freed.cooldown_s == state.cooldown_s


def test_only_the_trial_itself_can_abandon_it() -> None:
    _, trial = allow(fail(fail(fail(CLOSED, 0), 0), 0), 60)
    assert abandon(trial, None) == trial
    assert abandon(trial, 59.0) == trial
    assert abandon(CLOSED, None) == CLOSED


def test_blocked_always_says_to_wait_at_least_a_second() -> None:
    state = fail(fail(fail(CLOSED, 0), 0), 0)
    assert blocked(CLOSED, 0) is None and blocked(state, 60) is None
    cooling = blocked(state, 59.7)
    assert cooling is not None and cooling.retry_after == 1 and "open for another 1s" in cooling.reason
    assert blocked(state, 1.5).retry_after == 59
    _, trial = allow(state, 60)
    running = blocked(trial, 200)
    assert running is not None and running.retry_after == 1
    assert "trial summary is running" in running.reason and "0.0" not in running.reason


def test_breaker_key_separates_model_and_upstream() -> None:
    assert breaker_key("m", "a") != breaker_key("m", "b") != breaker_key("n", "b")


@given(st.lists(st.tuples(st.sampled_from(["ok", "fail", "ask"]), st.floats(0, 500)),
                max_size=40))
def test_breaker_invariants(script: list[tuple[str, float]]) -> None:
    state, now = CLOSED, 0.0
    for op, wait in script:
        now += wait
        if op == "ask":
            allowed, after = allow(state, now)
            closed = state.opened_at is None
            cooled = not closed and now >= state.opened_at + state.cooldown_s
            live_trial = state.trial_started_at is not None and now < state.trial_started_at + 300
            assert allowed == (closed or (cooled and not live_trial))
            assert after == state if closed or not allowed else after.trial_started_at == now
            state = after
        elif op == "ok":
            state = record_success(state)
            assert status(state, now) is Status.CLOSED
        else:
            state = fail(state, now)
        assert state.failures < SETTINGS.failures
        assert state.cooldown_s <= SETTINGS.max_cooldown_s
        if state.opened_at is not None:
            assert state.cooldown_s >= SETTINGS.base_cooldown_s
