"""When to compact, as properties (SPEC §5 trigger and hysteresis, §9).

From SPEC alone, for any profile, output reservation, estimate and earlier checkpoint:
- a projection goes upstream without compaction (NONE, HOLD) only when it fits the model's
  input, and with a total `context_window` it leaves room for the request's own output;
- above the trigger, without a checkpoint holding it back, the proxy compacts; at or below
  it, it does nothing;
- after a compaction made under this trigger, the next waits until the projection has grown
  by the margin (`rearm_ratio * trigger` beyond the event's `tokens_after`); a projection
  that has not grown and no longer fits gets the clear error, never a forward;
- a larger estimate never asks for less.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.trigger import Action, decide, thresholds
from proxy.records import CompactionEvent
from proxy.settings import CompactionSettings, ModelProfile

_RANK = {Action.NONE: 0, Action.HOLD: 1, Action.COMPACT: 2, Action.REFUSE: 2}


@st.composite
def profiles_and_outputs(draw: st.DrawFn) -> tuple[ModelProfile | None, int]:
    """A model's profile (or none) and the output a request reserves, as the settings allow."""
    window = draw(st.none() | st.integers(1000, 400_000))
    total = draw(st.none() | st.integers(1000, 500_000))
    if window is not None and total is not None and window > total:
        window, total = total, window  # the settings refuse an input larger than the whole window
    profile = draw(st.none() | st.just(ModelProfile("m*", max_input_tokens=window, context_window=total)))
    output = draw(st.just(0) | st.integers(1, 64_000))
    if profile is not None and total is not None and output >= total:
        output = total // 2  # a request that asks for more output than the window holds is upstream's to refuse
    return profile, output


@st.composite
def situations(draw: st.DrawFn) -> dict:
    settings = CompactionSettings(trigger_ratio=draw(st.floats(0.05, 1.0)), keep_ratio=draw(st.floats(0.01, 0.5)))
    profile, output = draw(profiles_and_outputs())
    th = thresholds(settings, profile, output)
    event = None
    if draw(st.booleans()):
        made = draw(st.integers(max(1, th.trigger // 4), th.trigger * 2))
        event = replace(_event(), tokens_after=draw(st.integers(1, made)), trigger=made)
    rearm = draw(st.floats(0.0, 0.5))
    return {"settings": settings, "profile": profile, "output": output, "th": th, "event": event,
            "rearm": rearm, "estimate": draw(st.integers(0, 600_000)), "more": draw(st.integers(0, 100_000))}


def _event() -> CompactionEvent:
    return CompactionEvent.from_data({
        "seq": 1, "created_at": 0.0, "cutoff_index": 3, "cutoff_message_id": None, "prefix_digest": "d",
        "summary_message": {"role": "user", "content": "s"}, "strategy": "partial",
        "tokens_before": 10, "tokens_after": 5, "model": "m", "summarizer_model": "m"})


@given(situations())
def test_what_goes_upstream_uncompacted_fits_with_room_for_its_output(case: dict) -> None:
    th, profile, estimate = case["th"], case["profile"], case["estimate"]
    decision = decide(estimate, th, case["event"], case["rearm"])
    if decision.action in (Action.NONE, Action.HOLD):
        assert estimate <= th.limit
        if profile is not None and profile.max_input_tokens:
            assert estimate <= profile.max_input_tokens
        if profile is not None and profile.context_window:
            assert estimate + case["output"] <= profile.context_window
        if profile is None:
            assert estimate <= case["settings"].fallback_trigger_tokens


@given(situations())
def test_above_the_trigger_compacts_unless_a_checkpoint_waits_for_growth(case: dict) -> None:
    th, event, estimate, rearm = case["th"], case["event"], case["estimate"], case["rearm"]
    decision = decide(estimate, th, event, rearm)
    if estimate <= th.trigger:
        assert decision.action is Action.NONE
        return
    holds = event is not None and event.trigger <= th.trigger
    grown = event is not None and estimate >= event.tokens_after + rearm * th.trigger
    if not holds or grown:
        assert decision.action is Action.COMPACT
    else:
        assert decision.action is (Action.HOLD if estimate <= th.limit else Action.REFUSE)
    assert decide(estimate, th, event, rearm, forced=True).action is Action.COMPACT


@given(situations())
def test_a_larger_estimate_never_asks_for_less(case: dict) -> None:
    th, event, rearm = case["th"], case["event"], case["rearm"]
    small = decide(case["estimate"], th, event, rearm).action
    large = decide(case["estimate"] + case["more"], th, event, rearm).action
    assert _RANK[large] >= _RANK[small], (small, large)
