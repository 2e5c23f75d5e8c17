"""`state.retention_days`: its default, what it reads, the values it refuses by name, and
`check-config` and `threads` showing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.records import ThreadKey
from proxy.settings import ConfigError, StateSettings, parse_settings
from proxy.store import SqliteStore
from tests.process import cli, write_config

UPSTREAMS = {"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}}}


def state_of(state: dict[str, object]) -> StateSettings:
    return parse_settings({**UPSTREAMS, "state": state}, {}).state


def test_the_default_keeps_a_thread_thirty_days() -> None:
    state = state_of({})
    assert state.retention_days == 30.0
    assert state.retention_s == 30 * 86_400.0


@pytest.mark.parametrize(("value", "seconds"), [(0, 0.0), (7, 7 * 86_400.0), (0.5, 43_200.0)])
def test_a_number_of_days_is_read(value: float, seconds: float) -> None:
    assert state_of({"retention_days": value}).retention_s == seconds


@pytest.mark.parametrize("value", [-1, -0.01, "30", "forever", True, [30], float("nan"),
                                   float("inf")])
def test_a_negative_or_non_number_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(ConfigError) as error:
        state_of({"retention_days": value})
    assert "state.retention_days" in str(error.value)


def test_check_config_prints_it_and_exits_1_on_a_bad_one(tmp_path: Path) -> None:
    good = write_config(tmp_path / "good.yaml", "http://127.0.0.1:9/v1", tmp_path / "state",
                        state={"retention_days": 7})
    shown = cli("check-config", "--config", str(good))
    assert shown.returncode == 0, shown.stderr
    assert "  retention_days: 7.0\n" in shown.stdout
    bad = write_config(tmp_path / "bad.yaml", "http://127.0.0.1:9/v1", tmp_path / "state",
                       state={"retention_days": -3})
    refused = cli("check-config", "--config", str(bad))
    assert refused.returncode == 1
    assert "state.retention_days" in refused.stderr and "at least 0" in refused.stderr


@pytest.mark.parametrize(("days", "said"), [
    (None, "a thread idle more than 30 days is removed (state.retention_days: 30)"),
    (0.5, "a thread idle more than 0.5 days is removed (state.retention_days: 0.5)"),
    (0, "threads are kept until removed by hand (state.retention_days: 0)")])
async def test_threads_says_how_long_an_idle_thread_is_kept(tmp_path: Path, days: float | None,
                                                            said: str) -> None:
    """On stderr: stdout stays the table, which scripts read."""
    store = SqliteStore(tmp_path / "state")
    await store.open()
    store.record_request(ThreadKey("tenant-a", "t1"), 1000.0, 5)
    await store.close()
    state = {} if days is None else {"retention_days": days}
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state",
                          state=state)
    listed = cli("threads", "--config", str(config))
    assert listed.returncode == 0 and listed.stderr == said + "\n"
    assert listed.stdout.startswith("LAST ACTIVITY") and listed.stdout.count("\n") == 2
