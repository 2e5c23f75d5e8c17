"""`proxy.settings_diff`: which keys a reload changes, and which of them wait for a restart."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.settings import Settings, load_settings, parse_settings
from proxy.settings_diff import RESTART_ONLY, changed_keys, digest, plain, plan_reload, restart_only

BASE = load_settings("config/proxy.yaml", {})


def _raw(settings: Settings) -> Any:
    """The settings as a config file would write them (lists, not tuples)."""
    def lists(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: lists(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [lists(v) for v in value]
        return value
    return lists(plain(settings))


def _edited(edits: list[tuple[str, Any]]) -> Settings:
    raw = copy.deepcopy(_raw(BASE))
    for path, value in edits:
        *parents, last = path.split("|")
        node = raw
        for name in parents:
            node = node[name]
        node[last] = value
    return parse_settings(raw, {})


# Keys (| between the levels: a model pattern may hold a dot) and values each may take.
EDITS = st.sampled_from([
    ("server|port", st.integers(1, 65535)),
    ("server|max_body_mb", st.integers(1, 100)),
    ("server|shutdown_grace_s", st.floats(0, 100)),
    ("state|path", st.sampled_from(["./data", "/tmp/x", "./other"])),
    ("state|redis|prefix", st.sampled_from(["compaction-proxy:", "other:"])),
    ("logging|format", st.sampled_from(["json", "console"])),
    ("logging|level", st.sampled_from(["debug", "info", "warning", "error"])),
    ("tokens|cache_entries", st.integers(1000, 10**6)),
    ("tokens|safety_margin", st.floats(0, 1)),
    ("tokens|count_every_request", st.booleans()),
    ("compaction|enabled", st.booleans()),
    ("compaction|strategy", st.sampled_from(["partial", "full"])),
    ("compaction|breaker|failures", st.integers(1, 9)),
    ("threads|forward_headers", st.booleans()),
    ("threads|headers", st.sampled_from([["x-thread-id"], ["x-thread-id", "session_id"]])),
    ("models|gpt-4.1*|max_input_tokens", st.integers(1000, 2_000_000)),
    ("models|gpt-4o*|trigger_ratio", st.sampled_from([None, 0.5, 0.75])),
    ("upstreams|openai|api_key", st.sampled_from([None, "sk-one-0123456789", "sk-two-0123456789"])),
    ("upstreams|openai|timeout_s", st.floats(1, 900)),
]).flatmap(lambda edit: st.tuples(st.just(edit[0]), edit[1]))


@given(st.lists(EDITS, max_size=6))
def test_every_changed_key_is_applied_or_waits_for_a_restart_never_both(edits) -> None:
    loaded = _edited(edits)
    plan = plan_reload(BASE, loaded)
    wanted = set(changed_keys(BASE, loaded))
    assert set(plan.changed) | set(plan.restart_needed) == wanted
    assert not set(plan.changed) & set(plan.restart_needed)
    assert all(restart_only(key) for key in plan.restart_needed)
    assert not any(restart_only(key) for key in plan.changed)
    # What runs: the new file's values but for the restart-only keys, which keep theirs.
    assert changed_keys(plan.applied, loaded) == plan.restart_needed
    assert changed_keys(BASE, plan.applied) == plan.changed
    assert (digest(plan.applied) == digest(BASE)) == (not plan.changed)


@given(st.lists(EDITS, max_size=6))
def test_the_sections_are_those_of_the_applied_keys(edits) -> None:
    plan = plan_reload(BASE, _edited(edits))
    assert set(plan.sections) == {key.split(".")[0] for key in plan.changed}
    assert not {"server", "state"} & set(plan.sections)


def test_an_unchanged_file_changes_nothing() -> None:
    plan = plan_reload(BASE, load_settings("config/proxy.yaml", {}))
    assert plan.changed == () and plan.restart_needed == () and plan.sections == ()
    assert plan.applied == BASE


def test_a_key_is_named_as_the_file_writes_it_a_dotted_pattern_included() -> None:
    loaded = _edited([("models|gpt-4.1*|max_input_tokens", 5000),
                      ("server|port", 9000), ("logging|level", "error")])
    plan = plan_reload(BASE, loaded)
    assert plan.changed == ("models.gpt-4.1*.max_input_tokens", "logging.level")
    assert plan.restart_needed == ("server.port",)
    assert plan.sections == ("models", "logging")
    assert plan.applied.server.port == BASE.server.port
    assert plan.applied.logging.level == "error"


def test_a_profile_or_upstream_added_or_removed_is_one_key() -> None:
    raw = _raw(BASE)
    raw["models"]["new-*"] = {"max_input_tokens": 9000}
    del raw["models"]["o[134]*"]
    raw["upstreams"]["second"] = {"base_url": "http://127.0.0.1:9/v1"}
    raw["routes"] = [{"model": "new-*", "upstream": "second"}, *raw["routes"]]
    loaded = parse_settings(raw, {})
    assert plan_reload(BASE, loaded).changed == (
        "upstreams.second", "routes", "models.o[134]*", "models.new-*")


def test_profiles_put_in_another_order_change_the_models_section() -> None:
    # The first glob that matches wins: swapping two is a change a reload must apply.
    raw = _raw(BASE)
    assert len(raw["models"]) >= 2
    swapped = dict(reversed(list(raw["models"].items())))
    loaded = parse_settings({**raw, "models": swapped}, {})
    plan = plan_reload(BASE, loaded)
    assert plan.changed == ("models",) and plan.sections == ("models",)
    assert [p.pattern for p in plan.applied.models] == list(swapped)
    # One profile more, the others in their order: that one key alone.
    raw["models"]["new-*"] = {"max_input_tokens": 9000}
    assert plan_reload(BASE, parse_settings(raw, {})).changed == ("models.new-*",)


def test_a_rotated_api_key_is_a_change_though_check_config_shows_it_masked_alike() -> None:
    one = _edited([("upstreams|openai|api_key", "sk-one-0123456789")])
    two = _edited([("upstreams|openai|api_key", "sk-one-9876543210")])
    assert plan_reload(one, two).changed == ("upstreams.openai.api_key",)
    assert digest(one) != digest(two)


def test_the_restart_only_keys_name_real_keys() -> None:
    keys = {".".join(path) for path in _paths(plain(BASE))}
    assert set(RESTART_ONLY) <= keys


def _paths(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for key, value in data.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found += _paths(value, (*prefix, key))
    return found
