"""A section or list item of the wrong shape is one problem, at its path: not that problem and
then every key it should have held reported missing as well."""

from __future__ import annotations

import pytest
import yaml

from proxy.settings import ConfigError, parse_settings

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(text), {})
    return error.value.problems


@pytest.mark.parametrize("text, problem", [
    ("upstreams: [openai]\n", "upstreams: expected a mapping, got list"),
    ("upstreams: https://api.openai.com/v1\n", "upstreams: expected a mapping, got str"),
    ("- upstreams\n", "<root>: expected a mapping, got list"),
    (BASE + "routes:\n  - '*'\n", "routes[0]: expected a mapping, got str"),
    (BASE + "  v: http://127.0.0.1:9/v1\nroutes:\n  - {model: '*', upstream: u}\n",
     "upstreams.v: expected a mapping, got str"),
], ids=["upstreams list", "upstreams url", "top-level list", "route string", "upstream url"])
def test_a_value_of_the_wrong_shape_is_one_problem(text: str, problem: str) -> None:
    assert problems_of(text) == [problem]


def test_a_missing_key_of_a_mapping_is_still_required() -> None:
    assert problems_of(BASE + "routes:\n  - {model: '*'}\n") == ["routes[0].upstream: is required"]
