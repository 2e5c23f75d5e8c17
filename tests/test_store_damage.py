"""A `state.db` damaged inside (a bad page, not a bad header), on a real SQLite file.

The proxy refuses to start on it (quick_check), `check-state` reports it, and a proxy that
meets it while serving (check off, or damage after start) fails only the threads on the bad
page, in OpenAI's error shape, with one ERROR line naming the file and the remedy.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.errors import ProxyError
from proxy.records import CompactionEvent, ThreadKey
from proxy.settings import StateSettings
from proxy.store import SqliteStore, StoreError, create_store, open_read_only
from proxy.store.damage import StateDamaged, damaged_message, is_damage
from proxy.threads import tenant_digest
from tests.conftest import API_KEY
from tests.harness import RunningProxy
from tests.process import cli, write_config

TENANT = tenant_digest({"authorization": f"Bearer {API_KEY}"})
THREADS = 120
DAMAGED, SOUND = "thread-007", "thread-100"
PAGE = 4096


async def damaged_state(root: Path, how: str = "garbage") -> None:
    """A state of `THREADS` threads with one checkpoint each, cleanly closed, then the page
    that holds DAMAGED's checkpoint damaged (SOUND's is on another page): overwritten with
    garbage, or its first cell pointer sent past the end. quick_check stops on the first;
    on the second it lists the bad cell or stops, as SQLite happens to choose."""
    store = SqliteStore(root)
    await store.open()
    for i in range(THREADS):
        key = ThreadKey(TENANT, f"thread-{i:03d}")
        store.record_request(key, 1000.0 + i, 100)
        await store.add_event(key, CompactionEvent(
            1, "m", "p", {"role": "user", "content": f"MARK-{i:03d}-" + "s" * 600}))
    await store.close()
    data = bytearray((root / "state.db").read_bytes())
    page = data.find(b"MARK-007-") // PAGE
    assert page > 1 and data.find(b"MARK-100-") // PAGE != page
    if how == "garbage":
        data[page * PAGE:(page + 1) * PAGE] = b"\xa5" * PAGE
    else:
        assert data[page * PAGE] == 10  # a leaf of the events b-tree (WITHOUT ROWID)
        data[page * PAGE + 8:page * PAGE + 10] = (PAGE - 1).to_bytes(2, "big")
    (root / "state.db").write_bytes(bytes(data))


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Callable[..., None]:
        return lambda event, **fields: self.lines.append((level, event, fields))


@pytest.mark.parametrize("how", ["garbage", "cell_pointer"])
async def test_opening_refuses_a_damaged_file_with_its_path_and_the_remedy(
        tmp_path: Path, how: str) -> None:
    await damaged_state(tmp_path, how)
    before = hashlib.sha256((tmp_path / "state.db").read_bytes()).digest()
    store = create_store(StateSettings(path=str(tmp_path)))
    with pytest.raises(StoreError) as refused:
        await store.open()
    message = str(refused.value)
    assert str(tmp_path / "state.db") in message and "is damaged" in message
    assert "restore" in message and ".recover" in message
    assert hashlib.sha256((tmp_path / "state.db").read_bytes()).digest() == before
    # The lock was released: the operator's next attempt (check off) is not "in use".
    unchecked = SqliteStore(tmp_path, check_on_open=False)
    await unchecked.open()
    await unchecked.close()


async def test_a_bad_page_fails_only_its_threads_with_state_damaged_and_one_error_line(
        tmp_path: Path) -> None:
    await damaged_state(tmp_path)
    log = Lines()
    store = SqliteStore(tmp_path, check_on_open=False, log=log)
    await store.open()
    try:
        with pytest.raises(StateDamaged) as failed:
            await store.load(ThreadKey(TENANT, DAMAGED))
        assert isinstance(failed.value, ProxyError) and failed.value.code == "state_damaged"
        assert "state.db" in failed.value.body()["error"]["message"]
        sound = await store.load(ThreadKey(TENANT, SOUND))
        assert sound.event is not None and sound.event.seq == 1
        with pytest.raises(StateDamaged):
            await store.load(ThreadKey(TENANT, DAMAGED))
    finally:
        await store.close()
    damaged = [line for line in log.lines if line[1] == "state_damaged"]
    assert len(damaged) == 1, log.lines  # rate-limited: the second failure adds no line
    level, _, fields = damaged[0]
    assert level == "error" and fields["path"] == str(tmp_path / "state.db")
    assert fields["sqlite_error"] == "SQLITE_CORRUPT" and "restore" in fields["remedy"]


def test_the_message_names_the_first_problems_sqlite_listed_and_how_many_more() -> None:
    found = [f"On tree page {n} cell 0: Offset 4095 out of range" for n in range(2, 8)]
    message = damaged_message(Path("/s/state.db"), found)
    assert message.startswith("/s/state.db is damaged: On tree page 2 cell 0")
    assert "page 4" in message and "page 5" not in message and "(and 3 more)" in message


def test_integrity_check_reports_a_damage_that_stops_the_check_itself(tmp_path: Path) -> None:
    asyncio.run(damaged_state(tmp_path))
    with closing(open_read_only(tmp_path)) as db:
        verdict = db.integrity_check()
    assert verdict != "ok" and "malformed" in verdict


def test_check_state_reports_sound_and_damaged_states_and_changes_nothing(
        tmp_path: Path) -> None:
    sound, damaged = tmp_path / "sound", tmp_path / "damaged"
    asyncio.run(_filled(sound))
    asyncio.run(damaged_state(damaged))
    ok = cli("check-state", "--config",
             str(write_config(tmp_path / "a.yaml", "http://h/v1", sound)))
    assert ok.returncode == 0 and ok.stdout.startswith(f"ok: {sound / 'state.db'}"), ok
    before = hashlib.sha256((damaged / "state.db").read_bytes()).digest()
    bad = cli("check-state", "--config", str(write_config(tmp_path / "b.yaml", "http://h/v1",
                                                          damaged)))
    assert bad.returncode == 1 and "malformed" in bad.stdout, bad
    assert bad.stderr.count("\n") == 1 and "is damaged" in bad.stderr and "restore" in bad.stderr
    assert hashlib.sha256((damaged / "state.db").read_bytes()).digest() == before


def test_serve_refuses_to_start_on_a_damaged_state(tmp_path: Path) -> None:
    asyncio.run(damaged_state(tmp_path / "state"))
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    result = cli("serve", "--config", str(config))
    assert result.returncode == 1
    assert "is damaged" in result.stderr and "restore" in result.stderr, result.stderr


def test_a_request_of_a_damaged_thread_gets_openai_error_shape_others_are_served(
        tmp_path: Path, make_proxy: Callable[..., RunningProxy], fake: Any,
        loop_thread: Any) -> None:
    loop_thread.run(damaged_state(tmp_path / "state"))
    # retention off: the state's times are from 1970, and a sweep would meet the damage first
    proxy = make_proxy(fake, state_path=str(tmp_path / "state"),
                       state={"check_on_start": False, "retention_days": 0})
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    with client:
        with pytest.raises(openai.InternalServerError) as failed:
            client.chat.completions.create(model="gpt-4o", messages=[
                {"role": "user", "content": "hi"}], extra_headers={"x-thread-id": DAMAGED})
        assert failed.value.status_code == 500
        assert failed.value.body["code"] == "state_damaged"  # type: ignore[index]
        answer = client.chat.completions.create(model="gpt-4o", messages=[
            {"role": "user", "content": "hi"}], extra_headers={"x-thread-id": SOUND})
        assert answer.choices
    proxy.logs.settle()
    assert [line["path"] for line in proxy.logs.events("state_damaged")] == [
        str(tmp_path / "state" / "state.db")]
    assert not proxy.logs.events("unhandled_error")


async def _filled(root: Path) -> None:
    store = SqliteStore(root)
    await store.open()
    store.record_request(ThreadKey(TENANT, "t"), 1000.0, 1)
    await store.close()


def test_an_error_that_is_not_a_bad_page_is_not_called_damage() -> None:
    with closing(sqlite3.connect(":memory:")) as conn:
        with pytest.raises(sqlite3.OperationalError) as busy:
            conn.execute("SELECT * FROM missing")
    assert not is_damage(busy.value)


@pytest.mark.parametrize(("table", "data"), [("events", "{\"cutoff_index\": 1, \"cut"),
                                             ("events", "[1, 2]"),
                                             ("anchors", "{\"position\": 3}"),
                                             ("threads", "not json")])
async def test_a_row_sqlite_reads_but_the_proxy_cannot_decode_is_damage_too(
        tmp_path: Path, table: str, data: str) -> None:
    # Bit rot inside a row's payload passes every SQLite check: the row's JSON is what breaks.
    store = SqliteStore(tmp_path, log=Lines())
    await store.open()
    try:
        for thread in (DAMAGED, SOUND):
            key = ThreadKey(TENANT, thread)
            store.record_request(key, 1000.0, 100)
            await store.add_event(key, CompactionEvent(1, "m", "p", {"role": "user"}))
        await store.flush()
        with closing(sqlite3.connect(tmp_path / "state.db", isolation_level=None)) as conn:
            column = "microcompact" if table == "threads" else "data"
            if table == "anchors":
                conn.execute("INSERT INTO anchors (tenant, thread, data) VALUES (?, ?, ?)",
                             (TENANT, DAMAGED, data))
            else:
                conn.execute(f"UPDATE {table} SET {column} = ? WHERE thread = ?", (data, DAMAGED))
        with pytest.raises(StateDamaged):
            await store.load(ThreadKey(TENANT, DAMAGED))
        assert (await store.load(ThreadKey(TENANT, SOUND))).event is not None
    finally:
        await store.close()
