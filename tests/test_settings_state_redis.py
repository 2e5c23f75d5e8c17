"""`state.backend: redis` and its `state.redis` keys: defaults, checks, and a masked password."""

from __future__ import annotations

import pytest

from proxy.settings import ConfigError, RedisSettings, parse_settings
from proxy.settings_masked import masked

UPSTREAMS = {"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}}}


def settings_of(state: dict[str, object], env: dict[str, str] | None = None):
    return parse_settings({**UPSTREAMS, "state": state}, env or {})


def test_the_defaults_need_no_redis_section() -> None:
    state = settings_of({"backend": "redis"}).state
    assert state.backend == "redis"
    assert state.redis == RedisSettings()


def test_every_key_is_read() -> None:
    redis = settings_of({"backend": "redis", "redis": {
        "url": "rediss://cache.internal:6380/2", "prefix": "team-a:", "timeout_s": 1,
        "lease_s": 12}}).state.redis
    assert redis == RedisSettings("rediss://cache.internal:6380/2", "team-a:", 1.0, 12.0)


@pytest.mark.parametrize("url", ["redis://h", "redis://:pw@h:1/0", "REDIS://h:6379",
                                 "rediss://u:p@h/1", "unix:///run/redis.sock",
                                 "unix:///run/redis.sock?db=1"])
def test_redis_urls_are_accepted(url: str) -> None:
    assert settings_of({"redis": {"url": url}}).state.redis.url == url


@pytest.mark.parametrize("url", ["http://h:6379", "h:6379", "redis://", "unix://", "", "redis:// h"])
def test_other_urls_are_refused_naming_the_key(url: str) -> None:
    with pytest.raises(ConfigError) as error:
        settings_of({"redis": {"url": url}})
    assert "state.redis.url" in str(error.value)


def test_a_refused_url_is_shown_without_its_password() -> None:
    with pytest.raises(ConfigError) as error:
        settings_of({"redis": {"url": "http://:hunter2-secret@h:6379"}})
    assert "hunter2-secret" not in str(error.value)


@pytest.mark.parametrize(("key", "value"), [("prefix", ""), ("prefix", "  "), ("timeout_s", 0),
                                            ("lease_s", 0.5), ("lease_s", "long"),
                                            ("port", 6379)])
def test_bad_values_name_their_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as error:
        settings_of({"redis": {key: value}})
    assert f"state.redis.{key}" in str(error.value)


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ConfigError) as error:
        settings_of({"backend": "memcached"})
    assert "state.backend" in str(error.value) and "redis" in str(error.value)


def test_check_config_masks_the_password_even_from_the_environment() -> None:
    settings = settings_of({"backend": "redis", "redis": {"url": "${REDIS_URL}"}},
                           {"REDIS_URL": "redis://:s3cret-pass@cache:6379/0"})
    assert settings.state.redis.url == "redis://:s3cret-pass@cache:6379/0"
    shown = masked(settings)["state"]["redis"]["url"]
    assert "s3cret-pass" not in shown and shown.startswith("redis://")
