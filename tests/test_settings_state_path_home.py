"""`state.path` written with `~`, as a shell user writes a path in the home directory: it is
the home directory, never a directory named `~` made in the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.settings import ConfigError, load_state_settings, parse_settings

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def state_path(path: str, env: dict[str, str]) -> str:
    return parse_settings(yaml.safe_load(BASE + f"state:\n  path: '{path}'\n"), env).state.path


@pytest.mark.parametrize(("written", "meant"), [
    ("~", "/home/ann"), ("~/", "/home/ann/"), ("~/cp/data", "/home/ann/cp/data"),
    ("./data", "./data"), ("/srv/~/data", "/srv/~/data"), ("data~", "data~")])
def test_a_leading_tilde_is_the_home_directory(written: str, meant: str) -> None:
    assert state_path(written, {"HOME": "/home/ann"}) == meant


def test_the_state_commands_read_the_same_directory(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("state:\n  path: ~/cp\n")
    assert load_state_settings(config, {"HOME": "/home/ann"}).state.path == "/home/ann/cp"


@pytest.mark.parametrize(("written", "env"), [("~/data", {}), ("~ann/data", {"HOME": "/h"})])
def test_a_tilde_that_cannot_be_expanded_is_refused(written: str, env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as error:
        state_path(written, env)
    [problem] = error.value.problems
    assert problem.startswith("state.path: ") and "write the full path" in problem


@pytest.mark.parametrize("written", ["da\\0ta", "\\0", "~/da\\0ta"])
def test_a_path_with_a_nul_is_refused_at_check(written: str) -> None:
    # YAML's "\0" escape: no file system takes the character, and `serve` died on it opening
    # the state (`embedded null byte`) after `check-config` had passed it.
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(BASE + f'state:\n  path: "{written}"\n'), {"HOME": "/h"})
    [problem] = error.value.problems
    assert problem.startswith("state.path: ") and "NUL" in problem
