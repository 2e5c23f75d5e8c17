"""A model profile's `keep_ratio` must stay below its `trigger_ratio`, each taken from the profile
or, where it gives none, from the `compaction` section: a kept tail at or above the trigger
makes every compaction of those models fail its post-check. The section itself is checked the
same way (`settings_compaction.py`)."""

from __future__ import annotations

import pytest
import yaml

from proxy.settings import ConfigError, parse_settings

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def _parsed(text: str):
    return parse_settings(yaml.safe_load(BASE + text), {})


@pytest.mark.parametrize("profile, section", [
    ("{keep_ratio: 0.8}", ""),  # against the section's default trigger, 0.75
    ("{trigger_ratio: 0.1}", ""),  # against the section's default keep, 0.10
    ("{trigger_ratio: 0.3, keep_ratio: 0.4}", ""),
    ("{keep_ratio: 0.5}", "compaction:\n  trigger_ratio: 0.5\n  keep_ratio: 0.1\n"),
])
def test_a_profile_whose_kept_tail_reaches_its_trigger_is_refused(profile: str, section: str) -> None:
    with pytest.raises(ConfigError) as error:
        _parsed(f"models:\n  'small-*': {profile}\n{section}")
    assert [p for p in error.value.problems if p.startswith("models.small-*: keep_ratio")]


def test_profile_ratios_below_the_trigger_are_kept() -> None:
    settings = _parsed("models:\n  'small-*': {trigger_ratio: 0.5, keep_ratio: 0.2}\n"
                       "  big: {max_input_tokens: 100000}\n")
    assert [(p.trigger_ratio, p.keep_ratio) for p in settings.models] == [(0.5, 0.2), (None, None)]
