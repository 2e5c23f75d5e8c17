"""SPEC §9: the summarizer's circuit breaker, driven as the server drives it (`claim` before a
summary, `settle` after it, each with the attempt's trial stamp), against a model of the rules:

- closed: every attempt may run; the configured number of consecutive failures opens it;
- open: no attempt may run until the cooldown has passed; then exactly one trial at a time (a
  trial lost for `trial_timeout_s` stops blocking); the trial's failure opens it again with the
  cooldown doubled, up to its cap; its abandonment lets the next request try at once;
- any success closes it and resets every count;
- a failure that is not the running trial's (an attempt begun before it opened, or one an
  upstream overflow bought past it) says nothing the breaker does not know: it changes nothing;
- a summary the breaker refused is never attempted; an overflow's bypass asks it nothing.
The clock may also step back: the breaker then neither fails nor lets a second trial run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, initialize, invariant,
                                 multiple, rule)
from prometheus_client.parser import text_string_to_metric_families

from proxy.compaction import breaker
from proxy.server import breakers as breakers_module
from proxy.server.breakers import SummarizerBreakers
from proxy.settings_compaction import BreakerSettings
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session
from tests.test_compaction_failure_paths import post
from tests.test_compaction_failures import MODELS, _main_requests

KEY = breaker.breaker_key("summarizer", "upstream")
TRIAL_TIMEOUT_S = 300.0  # the pure breaker's default, which the server uses


@dataclass(eq=False)
class Attempt:
    stamp: float | None  # what `claim` gave it: the trial's stamp, None for any other
    started: float
    opening: int  # which opening of the breaker it was let run in (or, closed, followed)
    forced: bool = False
    lost: bool = False  # a trial another one replaced, past its timeout


@dataclass
class Model:
    settings: BreakerSettings
    failures: int = 0
    trips: int = 0
    opened_at: float | None = None
    trial: Attempt | None = None
    openings: int = 0  # times it opened from closed: a trial belongs to one of them
    running: list[Attempt] = field(default_factory=list)

    @property
    def cooldown(self) -> float:
        s = self.settings
        return min(s.max_cooldown_s, s.base_cooldown_s * 2.0 ** (self.trips - 1))

    def cooling(self, now: float) -> bool:
        return self.opened_at is not None and now < self.opened_at + self.cooldown

    def trial_running(self, now: float) -> bool:
        return self.trial is not None and now < self.trial.started + TRIAL_TIMEOUT_S

    def may_try(self, now: float) -> bool:
        return self.opened_at is None or not (self.cooling(now) or self.trial_running(now))

    def succeeded(self) -> None:
        self.failures, self.trips, self.opened_at, self.trial = 0, 0, None, None

    def failed(self, attempt: Attempt, now: float) -> None:
        if self.opened_at is None:
            self.failures += 1
            if self.failures >= self.settings.failures:
                self.failures, self.trips, self.opened_at = 0, 1, now
                self.openings += 1
        elif attempt is self.trial:
            self.trips, self.opened_at, self.trial = self.trips + 1, now, None

    def abandoned(self, attempt: Attempt) -> None:
        if attempt is self.trial:
            self.trial = None


class BreakerMachine(RuleBasedStateMachine):
    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.stepped_back = 0.0  # how far the clock went back, in all
        self._clock = breakers_module.clock
        breakers_module.clock = lambda: self.now

    def teardown(self) -> None:
        breakers_module.clock = self._clock

    @initialize(failures=st.integers(1, 4), base=st.sampled_from([0.0, 0.5, 1.0, 60.0]),
                factor=st.sampled_from([1.0, 2.0, 3.5, 30.0]))
    def configure(self, failures: int, base: float, factor: float) -> None:
        settings = BreakerSettings(failures=failures, base_cooldown_s=base,
                                   max_cooldown_s=base * factor)
        self.breakers = SummarizerBreakers(settings)
        self.model = Model(settings)

    @rule(seconds=st.floats(0, 2000, allow_nan=False) | st.sampled_from([0.0, 1.0, 60.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule(seconds=st.floats(0, 500, allow_nan=False))
    def clock_steps_back(self, seconds: float) -> None:
        self.now -= seconds
        self.stepped_back += seconds

    @rule(target=attempts)
    def request_asks_for_a_summary(self) -> object:
        self.now += 1e-6  # as a real clock: no two requests at the same instant
        may = self.model.may_try(self.now)
        blocked, stamp = self.breakers.claim(KEY)
        assert (blocked is None) == may, (blocked, self.model)
        if blocked is not None:
            return multiple()  # refused: no summary is attempted
        attempt = Attempt(stamp, self.now, self.model.openings)
        if self.model.opened_at is not None:
            assert stamp == self.now, "a summary let run while open is the trial"
            self._replace_trials(attempt)
        else:
            assert stamp is None
        self.model.running.append(attempt)
        return attempt

    def _replace_trials(self, trial: Attempt) -> None:
        """One trial at a time: another only once the one before it ended or was lost."""
        model = self.model
        for earlier in model.running:
            if earlier.stamp is not None and earlier.opening == model.openings and not earlier.lost:
                assert trial.started >= earlier.started + TRIAL_TIMEOUT_S, (earlier, trial)
                earlier.lost = True
        model.trial = trial

    @rule(target=attempts)
    def overflow_bypasses_the_breaker(self) -> Attempt:
        # The server does not ask the breaker for a compaction an upstream overflow bought.
        attempt = Attempt(None, self.now, self.model.openings, forced=True)
        self.model.running.append(attempt)
        return attempt

    @rule(attempt=consumes(attempts))
    def summary_succeeds(self, attempt: Attempt) -> None:
        self.breakers.settle(KEY, attempt.stamp, healthy=True)
        self.model.running.remove(attempt)
        self.model.succeeded()

    @rule(attempt=consumes(attempts))
    def summary_fails(self, attempt: Attempt) -> None:
        self.breakers.settle(KEY, attempt.stamp, healthy=False)
        self.model.running.remove(attempt)
        self.model.failed(attempt, self.now)

    @rule(attempt=consumes(attempts))
    def attempt_ends_without_a_verdict(self, attempt: Attempt) -> None:
        self.breakers.settle(KEY, attempt.stamp, healthy=None)
        self.model.running.remove(attempt)
        self.model.abandoned(attempt)

    @invariant()
    def blocked_says_what_the_model_says(self) -> None:
        if not hasattr(self, "model"):
            return
        model, now = self.model, self.now
        blocked = self.breakers.blocked(KEY)
        assert (blocked is None) == model.may_try(now), (blocked, model, now)
        if blocked is None:
            return
        assert blocked.retry_after >= 1
        if model.cooling(now):
            assert model.opened_at is not None
            assert blocked.wait_s == model.opened_at + model.cooldown - now
            # Never longer than the cooldown, but for the time the clock went back.
            assert blocked.wait_s <= model.cooldown + self.stepped_back + 1e-6  # float sums
            assert "open for another" in blocked.reason
        else:
            assert "trial summary is running" in blocked.reason

    @invariant()
    def status_follows_the_model(self) -> None:
        if not hasattr(self, "model"):
            return
        model, now = self.model, self.now
        counts = self.breakers.not_closed()
        if model.opened_at is None:
            assert not counts
        elif model.cooling(now) and model.trial is None:
            assert counts == {("upstream", "open"): 1}
        else:
            assert counts == {("upstream", "half_open"): 1}


TestBreakerMachine = BreakerMachine.TestCase


# Found by the machine above: a failure that was not the trial's, reported while the trial ran,
# was taken for the trial's: the breaker opened again with the cooldown doubled and forgot the
# trial, so a second trial could start beside the first, whose own failure was then ignored.
def test_a_failure_not_the_trials_while_the_trial_runs_changes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(breakers_module, "clock", lambda: now[0])
    breakers = SummarizerBreakers(BreakerSettings(failures=1, base_cooldown_s=60,
                                                  max_cooldown_s=600))
    _, early = breakers.claim(KEY)  # begun while it was closed
    breakers.settle(KEY, breakers.claim(KEY)[1], healthy=False)  # opens it at 0
    now[0] = 60
    blocked, trial = breakers.claim(KEY)
    assert blocked is None and trial == 60
    now[0] = 61
    breakers.settle(KEY, early, healthy=False)  # late
    breakers.settle(KEY, None, healthy=False)  # an overflow's compaction, never claimed
    for moment in (61, 181, 359):
        now[0] = moment
        blocked = breakers.blocked(KEY)
        assert blocked is not None and "trial summary is running" in blocked.reason
        assert breakers.claim(KEY)[0] is not None, "a second trial beside the running one"
    now[0] = 200
    breakers.settle(KEY, trial, healthy=False)  # the trial's own failure doubles the cooldown
    blocked = breakers.blocked(KEY)
    assert blocked is not None and blocked.wait_s == 120


# The server's side: requests of every size through a real proxy while a fake summarizer fails
# or works as drawn, the breakers' clock moved by the test. A coding session's tool results the
# cheap stages shrink (its requests over the limit come under it); plain text they leave alone.
# `small-liar`'s profile is the others' (`small-*`), but upstream it takes only `LIAR_LIMIT`:
# its requests over that come back as an overflow, which buys a compaction past the breaker.
# One summarizer model for all: one breaker.
LIAR_LIMIT = 9_000
SIZES = {"under the trigger": (4_000, 9_000), "between trigger and limit": (12_600, 14_500),
         "over the limit": (int(LIMIT * 1.05), LIMIT * 2),
         "overflowing upstream": (LIAR_LIMIT + 300, 11_300)}
KINDS = [("text", size) for size in SIZES] + [("tools", "over the limit")]
CLEAR_ERRORS = {"compaction_unavailable", "context_compaction_insufficient"}
SERVER_BREAKER = {"failures": 2, "base_cooldown_s": 10, "max_cooldown_s": 40}


def _text_session(turns: int) -> list[dict[str, Any]]:
    words = "the build passes on linux but the windows runner times out in the linker step "
    return [{"role": "system", "content": "You are a helpful assistant."}] + [
        {"role": "user" if i % 2 == 0 else "assistant",
         "content": f"message {i}: " + words * 25} for i in range(turns)]


@lru_cache(maxsize=1)
def _requests_by_kind() -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    """Request-shaped prefixes (ending before an assistant turn) of each session, by size."""
    found: dict[tuple[str, str], list[list[dict[str, Any]]]] = {kind: [] for kind in KINDS}
    for name, messages in (("tools", planted_session(200)[0]), ("text", _text_session(200))):
        for k in range(1, len(messages)):
            if messages[k]["role"] != "assistant":
                continue
            tokens = chat_prompt_tokens({"messages": messages[:k]})
            for size, (low, high) in SIZES.items():
                if (name, size) in found and low <= tokens <= high:
                    found[name, size].append(messages[:k])
    assert all(found.values()), {kind: len(found[kind]) for kind in found}
    return found


# Mostly failures, mostly no time between requests: the breaker opens, and stays open a while.
steps = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 10**6),
                           st.sampled_from([True, True, True, False]),
                           st.sampled_from([0.0, 0.0, 5.0, 11.0, 50.0])), min_size=2, max_size=8)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(script=steps)
def test_an_open_breaker_never_forwards_an_over_long_request_nor_asks_the_summarizer(
        make_fake: Any, make_proxy: Any, monkeypatch: pytest.MonkeyPatch,
        script: list[tuple[tuple[str, str], int, bool, float]]) -> None:
    now = [1_000.0]
    monkeypatch.setattr(breakers_module, "clock", lambda: now[0])
    fake = make_fake(limits={"small-liar": LIAR_LIMIT, "small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction={
        "breaker": SERVER_BREAKER, "summarizer": {"model": "small-summarizer"}})
    for n, (kind, pick, fails, seconds) in enumerate(script):
        choices = _requests_by_kind()[kind]
        request = choices[pick % len(choices)]
        overflowing = kind[1] == "overflowing upstream"
        was_open = _breaker_open(proxy)
        asked, forwarded = summarizer.calls, len(_main_requests(fake))
        forced = _forced_compactions(proxy)
        summarizer.fail = 10**6 if fails else 0
        fake.script(Reply.text("ok"), Reply.text("ok"))
        answer = post(proxy, request, f"step-{n}",
                      model="small-liar" if overflowing else "small-coder")
        sent = _main_requests(fake)[forwarded:]
        line = proxy.requests()[-1]
        event(f"{'open' if was_open else 'not open'}, {kind}: {answer.status_code}")
        assert all(chat_prompt_tokens(r.json) <= LIMIT for r in sent), \
            f"an over-long request went upstream ({kind})"
        if answer.status_code != 200 and overflowing:  # the upstream's own error, relayed
            assert answer.json()["error"]["code"] in {*CLEAR_ERRORS, "context_length_exceeded"}
        elif answer.status_code != 200:
            assert answer.json()["error"]["code"] in CLEAR_ERRORS, answer.text
            assert not sent and int(answer.headers.get("retry-after", "1")) >= 1
        bypassed = line.get("retried") == "context_overflow"
        # An overflow buys one compaction past the breaker and one retry, no more.
        assert len(sent) <= (2 if bypassed else 1)
        assert _forced_compactions(proxy) - forced == (1 if bypassed and summarizer.calls > asked
                                                       else 0)
        if was_open:
            assert summarizer.calls == asked or bypassed, \
                "the summarizer was asked while the breaker was open"
        now[0] += seconds


def _forced_compactions(proxy: Any) -> int:
    return sum(1 for e in proxy.logs.events("compaction_started") if e.get("forced"))


def _breaker_open(proxy: Any) -> bool:
    text = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    return any(sample.name == "proxy_summarizer_breakers" and sample.value == 1
               and sample.labels.get("state") == "open"
               for family in text_string_to_metric_families(text) for sample in family.samples)
