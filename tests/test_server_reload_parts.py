"""What a reload builds anew and what it shares (`proxy.server.reload.reconfigured`), in process."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proxy.server.origins import Origins
from proxy.server.reload import reconfigured
from proxy.server.services import Configured
from tests.harness import proxy_settings

TWO = {"upstreams": {"other": {"base_url": "http://127.0.0.1:8/v1"}},
       "routes": [{"model": "o*", "upstream": "other"}, {"model": "*", "upstream": "fake"}]}


def test_the_settings_and_what_follows_from_them_are_new_the_state_is_shared(
        tmp_path: Path) -> None:
    from proxy.server.pipeline import Pipeline
    old = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path),
                         models={"m*": {"max_input_tokens": 100000}})
    new = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path),
                         models={"m*": {"max_input_tokens": 4000}},
                         compaction={"breaker": {"failures": 7}})
    running = Configured(old, Pipeline(old))
    after = reconfigured(running, new)
    before, now = running.pipeline, after.pipeline
    assert now.settings is new and before.settings is old
    assert now.estimators.thresholds("m1", 0).limit == 4000
    assert before.estimators.thresholds("m1", 0).limit == 100000  # requests under way
    assert now.compactor.settings is new and now.flow.settings is new
    assert now.flow.compactor is now.compactor
    assert now.compactor.breakers.settings.failures == 7
    assert before.compactor.breakers.settings.failures != 7
    assert now.compactor.breakers._states is before.compactor.breakers._states  # noqa: SLF001
    assert now.compactor.turns is before.compactor.turns  # one compaction per thread, still
    assert now.store is before.store and now.history is before.history
    assert now.identities is before.identities
    assert now.lessons is before.lessons  # the same routes and upstreams
    assert now.estimators.estimator("m1") is before.estimators.estimator("m1")  # same tokens


def test_new_routes_forget_the_retry_lessons_and_keep_the_origins_memory(tmp_path: Path) -> None:
    from proxy.server.pipeline import Pipeline
    old = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path), **TWO)
    moved = {**TWO, "routes": [{"model": "f*", "upstream": "fake"},
                               {"model": "*", "upstream": "other"}]}
    new = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path), **moved)
    origins = Origins(old.upstreams, None, lambda: 0.0)
    origins.remember("resp_1", old.upstreams["fake"])
    running = Configured(old, Pipeline(old), origins)
    after = reconfigured(running, new)
    assert after.pipeline.lessons is not running.pipeline.lessons
    assert after.route("m").name == "other" and running.route("m").name == "fake"
    assert after.origins is not None and "resp_1" in after.origins


def test_an_id_goes_to_its_upstream_as_the_config_in_force_names_it(tmp_path: Path) -> None:
    old = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path), **TWO)
    rotated = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path),
                             upstreams={"fake": {"api_key": "sk-new-0123456789"},
                                        **TWO["upstreams"]},
                             routes=TWO["routes"])
    origins = Origins(old.upstreams, None, lambda: 0.0)
    origins.remember("resp_1", old.upstreams["fake"])
    found = asyncio.run(origins.reconfigured(rotated.upstreams).upstream_of("resp_1"))
    assert found is rotated.upstreams["fake"] and found.api_key == "sk-new-0123456789"
    removed = {"other": old.upstreams["other"]}
    assert asyncio.run(origins.reconfigured(removed).upstream_of("resp_1")) is None
    assert asyncio.run(origins.upstream_of("resp_1")) is old.upstreams["fake"]


def test_tokenizers_loaded_off_the_loop_join_the_shared_estimators_when_adopted(
        tmp_path: Path) -> None:
    from proxy.server.pipeline import Pipeline
    old = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path),
                         models={"legacy-*": {"tokenizer": "r50k_base"}})
    new = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path),
                         models={"legacy-*": {"tokenizer": "r50k_base", "max_input_tokens": 4000}})
    running = Configured(old, Pipeline(old))
    after = reconfigured(running, new)
    estimators = after.pipeline.estimators
    said = estimators.load()  # as a reload's worker thread does
    assert set(said) == {"legacy-*", "<default>"}
    loaded = {e.tokenizer.wanted: e for e in estimators._loaded.values()}  # noqa: SLF001
    # A request under way (on the loop) makes its own: the shared ones were only read.
    meanwhile = running.pipeline.estimators.estimator("legacy-1")
    assert meanwhile is not loaded["r50k_base"]
    estimators.adopt()
    assert estimators.estimator("legacy-1") is meanwhile  # its cache kept
    assert estimators.estimator("some-model") is loaded["o200k_base"]
    assert running.pipeline.estimators.estimator("some-model") is loaded["o200k_base"]


def test_a_changed_safety_margin_shares_the_counts_and_not_the_margin(tmp_path: Path) -> None:
    from proxy.server.pipeline import Pipeline
    old = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path), tokens={"safety_margin": 0.03})
    new = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path), tokens={"safety_margin": 0.5})
    running = Configured(old, Pipeline(old))
    before = running.pipeline.estimators.estimator("m1")
    after = reconfigured(running, new).pipeline.estimators.estimator("m1")
    assert after.tokenizer is before.tokenizer
    assert after._entries is before._entries and after._texts is before._texts  # noqa: SLF001
    assert after.with_margin(100) == 150
    assert before.with_margin(100) == 103  # a request under way keeps the margin it began with
    cached = proxy_settings("http://127.0.0.1:9/v1", str(tmp_path),
                            tokens={"safety_margin": 0.5, "cache_entries": 5000})
    other = reconfigured(running, cached).pipeline.estimators.estimator("m1")
    assert other._entries is not before._entries  # noqa: SLF001 - cache_entries read anew
