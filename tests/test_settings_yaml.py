"""Reading the config file (`proxy.settings_yaml`): a file that is no regular file is refused
before it is read (a FIFO's read may never end), and a problem never quotes the file's text
(a value that starts with `!` or `*`, a generated key's, is read as a tag or an alias)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from proxy.settings import ConfigError, load_settings
from tests.process import cli

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n    api_key: {key}\n"


@pytest.mark.parametrize("key, named", [
    ("!Pa55-SECRET-VALUE", "an unknown tag"),
    ("!!Pa55-SECRET-VALUE", "an unknown tag"),
    ("!x!Pa55-SECRET-VALUE", "an undefined tag handle"),
    ("*Pa55-SECRET-VALUE", "an undefined alias"),
])
def test_a_secret_read_as_a_tag_or_an_alias_is_not_quoted(tmp_path: Path, key: str,
                                                          named: str) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(BASE.format(key=key))
    with pytest.raises(ConfigError) as error:
        load_settings(config, {})
    [problem] = error.value.problems
    assert problem == (f"<file>: {config} is not valid YAML: {named} (line 4, column 14): "
                       "a value that starts with ! or * must be quoted")
    checked = cli("check-config", "--config", str(config))
    assert checked.returncode == 1 and problem in checked.stderr
    assert "Pa55" not in checked.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_at_once_not_read(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    os.mkfifo(config)  # nobody writes it: a read would wait for ever
    problems: list[str] = []

    def load() -> None:
        try:
            load_settings(config, {})
        except ConfigError as error:
            problems.extend(error.problems)

    reading = threading.Thread(target=load, daemon=True)
    reading.start()
    reading.join(5)
    try:
        assert not reading.is_alive(), "the read of a FIFO blocked"
        assert problems == [f"<file>: {config} is not a regular file: the config is read from "
                            "a file (not a FIFO, socket or device)"]
    finally:
        if reading.is_alive():  # the old code's read, blocked: ended
            os.close(os.open(config, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no /dev/null here")
def test_a_device_is_refused_and_a_directory_still_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(os.devnull, {})
    assert error.value.problems[0].endswith("is not a regular file: the config is read from "
                                            "a file (not a FIFO, socket or device)")
    with pytest.raises(ConfigError) as error:
        load_settings(tmp_path, {})
    assert error.value.problems == [f"<file>: cannot read {tmp_path}: Is a directory"]
