from __future__ import annotations

from proxy.compaction.trigger import Action, decide, requested_output_tokens, thresholds
from proxy.records import CompactionEvent
from proxy.settings import CompactionSettings, ModelProfile

SETTINGS = CompactionSettings()


def event(tokens_after: int, trigger: int = 0) -> CompactionEvent:
    return CompactionEvent(cutoff_index=3, cutoff_message_id="a#0", prefix_digest="v1:x",
                           summary_message={"role": "user", "content": "s"},
                           tokens_after=tokens_after, trigger=trigger)


def test_profile_ratios_from_settings() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=100_000))
    assert (th.trigger, th.keep_tokens, th.keep_messages, th.limit) == (75_000, 10_000, None,
                                                                        100_000)


def test_profile_overrides_ratios() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=100_000, trigger_ratio=0.5,
                                           keep_ratio=0.2))
    assert (th.trigger, th.keep_tokens) == (50_000, 20_000)


def test_without_profile_falls_back_to_tokens_and_messages() -> None:
    th = thresholds(SETTINGS, None, reserved_output=50_000)
    assert (th.trigger, th.keep_tokens, th.keep_messages, th.profiled) == (100_000, None, 6,
                                                                           False)
    assert thresholds(SETTINGS, ModelProfile("m", tokenizer="o200k_base")).trigger == 100_000


def test_output_reservation_counts_only_with_context_window() -> None:
    with_window = ModelProfile("m", max_input_tokens=100_000, context_window=128_000)
    assert thresholds(SETTINGS, with_window, 8_000).limit == 100_000
    th = thresholds(SETTINGS, with_window, 60_000)
    assert (th.limit, th.trigger, th.reserved_output) == (68_000, 51_000, 60_000)
    no_window = ModelProfile("m", max_input_tokens=100_000)
    assert thresholds(SETTINGS, no_window, 60_000).trigger == 75_000


def test_a_reservation_that_fills_the_window_is_left_to_upstream() -> None:
    """Its `max_tokens` alone fills the window: no compaction makes room, so none is planned for
    it (the upstream's refusal names the cause; a limit of no input would have refused it as
    `context_compaction_insufficient`, with advice to start a new thread)."""
    window = ModelProfile("m", context_window=8_000)
    for reserved in (8_000, 9_000):
        th = thresholds(SETTINGS, window, reserved)
        assert (th.limit, th.trigger, th.reserved_output) == (8_000, 6_000, 0)
    assert thresholds(SETTINGS, window, 7_999).limit == 1


def test_context_window_alone_is_the_input_limit() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", context_window=10_000), 2_000)
    assert (th.limit, th.trigger) == (8_000, 6_000)


def test_requested_output_tokens_reads_every_api_key() -> None:
    assert requested_output_tokens({"max_tokens": 10}) == 10
    assert requested_output_tokens({"max_completion_tokens": 20, "max_tokens": 10}) == 20
    assert requested_output_tokens({"max_output_tokens": 30}) == 30
    assert requested_output_tokens({"max_tokens": None, "max_output_tokens": True}) == 0


def test_below_trigger_does_nothing_above_compacts() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))
    assert decide(750, th, None, 0.05).action is Action.NONE
    assert decide(751, th, None, 0.05).action is Action.COMPACT


def test_hysteresis_waits_for_growth_after_a_compaction() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))  # trigger 750
    last = event(tokens_after=740)
    held = decide(760, th, last, 0.05)
    assert (held.action, held.rearm_at) == (Action.HOLD, 778)
    assert decide(778, th, last, 0.05).action is Action.COMPACT


def test_not_rearmed_and_over_the_window_is_refused_not_summarized() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))
    assert decide(1001, th, event(990), 0.05).action is Action.REFUSE


def test_forced_compaction_ignores_hysteresis() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))
    assert decide(100, th, event(740), 0.05, forced=True).action is Action.COMPACT


def test_a_checkpoint_made_for_a_larger_window_does_not_hold_a_smaller_one_back() -> None:
    small = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))  # trigger 750
    made_for_big = event(tokens_after=1050, trigger=2250)
    assert decide(1060, small, made_for_big, 0.05).action is Action.COMPACT
    assert decide(1060, small, event(1050, trigger=750), 0.05).action is Action.REFUSE


def test_a_checkpoint_made_for_a_smaller_window_still_holds() -> None:
    big = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))  # trigger 750
    assert decide(760, big, event(740, trigger=600), 0.05).action is Action.HOLD


def test_an_event_stored_without_its_trigger_keeps_the_hysteresis() -> None:
    th = thresholds(SETTINGS, ModelProfile("m", max_input_tokens=1000))
    stored = {k: v for k, v in event(740, trigger=2250).to_data().items() if k != "trigger"}
    old = CompactionEvent.from_data(stored)
    assert old.trigger == 0
    assert decide(760, th, old, 0.05).action is Action.HOLD
