"""Reading the config file (`proxy.settings_yaml`): a file that is no regular file is refused
before it is read (a FIFO's read may never end)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from proxy.settings import ConfigError, load_settings


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
