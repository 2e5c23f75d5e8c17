"""A state.db that is not a database at all: the state commands call it damaged, as `serve`
does, and give the same remedy."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.store import StoreError, open_read_only
from proxy.store.damage import REMEDY
from tests.process import cli, write_config

GARBAGE = b"garbage" * 1000


def not_a_database(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(GARBAGE)
    return state


def test_reading_it_says_damaged_with_the_remedy(tmp_path: Path) -> None:
    state = not_a_database(tmp_path)
    with pytest.raises(StoreError) as raised:
        open_read_only(state)
    assert str(raised.value) == (f"{state / 'state.db'} is damaged: file is not a database; "
                                 f"{REMEDY}")


@pytest.mark.parametrize("command", [["check-state"], ["threads"]])
def test_the_state_commands_say_what_serve_says(tmp_path: Path, command: list[str]) -> None:
    state = not_a_database(tmp_path)
    config = str(write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", state))
    served = cli("serve", "--config", config)
    checked = cli(*command, "--config", config)
    assert checked.returncode == 1 and checked.stderr.count("\n") == 1, checked
    told = checked.stderr.removeprefix("compaction-proxy: ").strip()
    assert told == f"{state / 'state.db'} is damaged: file is not a database; {REMEDY}"
    assert told in served.stderr, served.stderr
    assert (state / "state.db").read_bytes() == GARBAGE
