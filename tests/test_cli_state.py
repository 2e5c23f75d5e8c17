"""`threads` and `inspect`: read-only, whole ids that `inspect` takes, one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.records import CompactionEvent, ThreadKey
from proxy.store import SqliteStore, StoreError
from proxy.store.keys import thread_key_text
from tests.process import cli, write_config

IDS = ["short", "y" * 250, "a" * 300, "with space", "线程-🧵", "\x00nul"]


def config_for(tmp_path: Path, state: Path) -> str:
    return str(write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", state))


async def filled(state: Path, ids: list[str] = IDS, tenants: tuple[str, ...] = ("tenant-a",),
                 keep_open: bool = False) -> SqliteStore:
    store = SqliteStore(state)
    await store.open()
    for n, thread in enumerate(ids):
        for tenant in tenants:
            store.record_request(ThreadKey(tenant, thread), 1000.0 + n, 100 + n)
    await store.flush()
    if not keep_open:
        await store.close()
    return store


def listed_ids(stdout: str) -> list[str]:
    header, *rows = stdout.split("\n")[:-1]
    start = header.index("THREAD")
    return [row[start:] for row in rows]


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


async def test_every_id_threads_lists_is_whole_and_accepted_by_inspect(tmp_path: Path) -> None:
    await filled(tmp_path / "state")
    config = config_for(tmp_path, tmp_path / "state")
    result = cli("threads", "--config", config)
    assert result.returncode == 0, result.stderr
    shown = listed_ids(result.stdout)
    assert sorted(shown) == sorted(thread_key_text(i) for i in IDS)
    for thread in shown:
        inspected = cli("inspect", thread, "--config", config)
        assert inspected.returncode == 0, (thread, inspected.stderr)
        [state] = json.loads(inspected.stdout)
        assert state["key"]["thread"] == thread


async def test_inspect_always_prints_a_list_of_states_one_per_tenant(tmp_path: Path) -> None:
    await filled(tmp_path / "state", ["solo"])
    await filled(tmp_path / "state", ["shared"], tenants=("tenant-a", "tenant-b"))
    config = config_for(tmp_path, tmp_path / "state")
    solo = json.loads(cli("inspect", "solo", "--config", config).stdout)
    shared = json.loads(cli("inspect", "shared", "--config", config).stdout)
    assert [s["key"]["tenant"] for s in solo] == ["tenant-a"]
    assert [s["key"]["tenant"] for s in shared] == ["tenant-a", "tenant-b"]
    assert solo[0]["last_estimate"] == 100


@pytest.mark.parametrize("limit", ["0", "-1", "many"])
def test_limit_must_be_a_positive_integer(tmp_path: Path, limit: str) -> None:
    result = cli("threads", "--limit", limit, "--config", config_for(tmp_path, tmp_path / "s"))
    assert result.returncode == 2 and "--limit" in result.stderr and "usage:" in result.stderr


def test_a_missing_state_directory_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    state = tmp_path / "typo" / "data"
    config = config_for(tmp_path, state)
    for command in (["threads"], ["inspect", "t1"]):
        assert_one_line_error(cli(*command, "--config", config), str(state), "no state directory")
    assert not (tmp_path / "typo").exists()


def test_a_missing_or_broken_database_is_an_error_and_left_as_it_was(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    config = config_for(tmp_path, state)
    assert_one_line_error(cli("threads", "--config", config), str(state / "state.db"))
    assert list(state.iterdir()) == []
    (state / "state.db").write_bytes(b"not a database" * 100)
    for command in (["threads"], ["inspect", "t1"]):
        assert_one_line_error(cli(*command, "--config", config), str(state / "state.db"))
    assert (state / "state.db").read_bytes() == b"not a database" * 100


async def test_inspect_prints_a_checkpoint_that_holds_a_lone_surrogate(tmp_path: Path) -> None:
    # The stores keep lone surrogates (a client's "\ud800" escape, restored verbatim in a
    # checkpoint); orjson refuses to write them.
    store = await filled(tmp_path / "state", ["t1"], keep_open=True)
    restored = {"role": "user", "content": "half a pair: \ud800"}
    await store.add_event(ThreadKey("tenant-a", "t1"), CompactionEvent(
        3, "m3", "v1:d", {"role": "user", "content": "summary"}, restore_messages=(restored,)))
    await store.close()
    result = cli("inspect", "t1", "--config", config_for(tmp_path, tmp_path / "state"))
    assert result.returncode == 0, result.stderr
    [state] = json.loads(result.stdout)
    assert state["checkpoint"]["restore_messages"] == [restored]


async def test_reading_never_migrates_or_changes_the_journal_mode(tmp_path: Path) -> None:
    state = tmp_path / "state"
    await filled(state, ["t1"])
    conn = sqlite3.connect(state / "state.db")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    before = _digest(state / "state.db")
    config = config_for(tmp_path, state)
    assert cli("threads", "--config", config).returncode == 0
    assert cli("inspect", "t1", "--config", config).returncode == 0
    assert _digest(state / "state.db") == before
    conn = sqlite3.connect(state / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()


async def test_reads_the_latest_commits_while_the_owner_runs(tmp_path: Path) -> None:
    owner = await filled(tmp_path / "state", ["t1"], keep_open=True)
    try:
        owner.record_request(ThreadKey("tenant-a", "t1"), 2000.0, 4321)
        await owner.flush()
        result = cli("inspect", "t1", "--config", config_for(tmp_path, tmp_path / "state"))
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[0]["last_estimate"] == 4321
    finally:
        await owner.close()


@pytest.mark.parametrize("owner_running", [False, True], ids=["stopped", "running"])
async def test_reads_a_read_only_state_directory(tmp_path: Path, owner_running: bool) -> None:
    state = tmp_path / "state"
    owner = await filled(state, ["t1"], keep_open=owner_running)
    try:
        config = config_for(tmp_path, state)
        for command in (["threads"], ["inspect", "t1"]):
            result = _read_only_run(state, [sys.executable, "-m", "proxy", *command,
                                             "--config", config])
            assert result.returncode == 0, result.stderr
            assert "t1" in result.stdout
    finally:
        await owner.close()


def _read_only_run(directory: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`argv` run with `directory` read-only: a read-only bind mount in a mount namespace of
    its own when we are root (root writes through file modes), else the directory's modes."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if os.geteuid() != 0:
        directory.chmod(0o500)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=60)
        finally:
            directory.chmod(0o700)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare to make a directory read-only for root")
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 98; '
              'touch "$1/probe" 2>/dev/null && exit 98; shift; exec "$@"')
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(directory), *argv],
                            capture_output=True, text=True, timeout=60)
    if result.returncode == 98 or "unshare:" in result.stderr:
        pytest.skip(f"cannot make a read-only mount here: {result.stderr.strip()}")
    return result


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_newer_schema_is_refused_by_every_command_and_never_written(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    await filled(state, ["t1"])
    with sqlite3.connect(state / "state.db", isolation_level=None) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 0)")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _digest(state / "state.db")
    config = config_for(tmp_path, state)
    for command in (["threads"], ["inspect", "t1"], ["check-state"]):
        assert_one_line_error(cli(*command, "--config", config), "schema version 99", "newer")
    with pytest.raises(StoreError, match="newer"):
        await SqliteStore(state).open()
    assert _digest(state / "state.db") == before


@pytest.mark.parametrize("owner_running", [False, True], ids=["stopped", "running"])
async def test_check_state_runs_beside_the_owner_and_on_a_read_only_directory(
        tmp_path: Path, owner_running: bool) -> None:
    state = tmp_path / "state"
    owner = await filled(state, IDS, keep_open=owner_running)
    try:
        config = config_for(tmp_path, state)
        beside = cli("check-state", "--config", config)
        assert beside.returncode == 0 and beside.stdout.startswith("ok: "), beside
        read_only = _read_only_run(state, [sys.executable, "-m", "proxy", "check-state",
                                           "--config", config])
        assert read_only.returncode == 0 and read_only.stdout.startswith("ok: "), read_only
    finally:
        await owner.close()


async def test_the_state_commands_read_only_the_state_section(tmp_path: Path) -> None:
    """An operator's shell may lack the serving environment (an upstream key's variable): the
    commands that only read the state database still run; a problem in `state` still stops
    them, and `serve`'s own check still names the variable."""
    state = tmp_path / "state"
    await filled(state, ["t1"])
    config = tmp_path / "env.yaml"
    config.write_text(f"upstreams:\n  openai:\n    base_url: https://api.openai.com/v1\n"
                      f"    api_key: ${{UNSET_KEY_FOR_THIS_TEST}}\nstate:\n  path: {state}\n")
    assert "UNSET_KEY_FOR_THIS_TEST" not in os.environ
    listed = cli("threads", "--config", str(config))
    assert listed.returncode == 0 and listed_ids(listed.stdout) == ["t1"], listed.stderr
    assert cli("inspect", "t1", "--config", str(config)).returncode == 0
    assert cli("check-state", "--config", str(config)).returncode == 0
    checked = cli("check-config", "--config", str(config))
    assert checked.returncode == 1 and "UNSET_KEY_FOR_THIS_TEST" in checked.stderr
    config.write_text(f"state:\n  path: ${{UNSET_KEY_FOR_THIS_TEST}}\n")
    refused = cli("threads", "--config", str(config))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "state.path: environment variable UNSET_KEY_FOR_THIS_TEST" in refused.stderr
