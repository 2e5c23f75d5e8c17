"""When the state store cannot say or keep which upstream made a stored answer, the request is
served all the same: a warning (`origin_not_read`, `origin_not_recorded`) with the error's type,
never a 500. On real SQLite files: a damaged page of the `origins` table, a store that is
closed, a full disk."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from proxy.server.services import SERVICES
from proxy.store import SqliteStore
from proxy.testing.fake_upstream import FakeUpstream
from tests.conftest import API_KEY
from tests.harness import LoopThread, RunningProxy

# `claude-*` goes to `other`; everything else, a request without a model too, to `fake`.
ROUTES = [{"model": "claude-*", "upstream": "other"}, {"model": "*", "upstream": "fake"}]
USER = [{"role": "user", "content": "Say hello."}]
PAGE = 4096
ORIGINS = 150


def _made_id(n: int) -> str:
    return f"resp_MADE{n:03d}_" + "x" * 200  # some 20 to a page: the table spans pages


async def _damaged_origins(root: Path, damaged: str) -> None:
    """A state whose `origins` rows were all made by `other`, cleanly closed, then the page
    of the table that holds `damaged` overwritten with garbage."""
    store = SqliteStore(root)
    await store.open()
    for n in range(ORIGINS):
        await store.add_origin(_made_id(n), "other", time.time())
    await store.close()
    data = bytearray((root / "state.db").read_bytes())
    # The table's row, not its index entry (made_at, id): the id, then the upstream.
    page = data.find(damaged.encode() + b"other") // PAGE
    assert page > 1 and data.find(_made_id(0).encode() + b"other") // PAGE != page
    data[page * PAGE:(page + 1) * PAGE] = b"\xa5" * PAGE
    (root / "state.db").write_bytes(bytes(data))


def _assert_served_without_crash(proxy: RunningProxy) -> None:
    assert not proxy.logs.events("unhandled_error")
    assert all(line["status"] != 500 for line in proxy.requests())


def test_an_origin_that_cannot_be_read_is_a_warning_and_the_request_goes_by_its_model(
        tmp_path: Path, make_fake: Callable[..., FakeUpstream],
        make_proxy: Callable[..., RunningProxy]) -> None:
    damaged, sound = _made_id(ORIGINS // 2), _made_id(0)
    root = tmp_path / "state"
    asyncio.run(_damaged_origins(root, damaged))
    main, other = make_fake(), make_fake()
    proxy = make_proxy(main, state_path=str(root), state={"check_on_start": False},
                       upstreams={"other": {"base_url": other.url}}, routes=ROUTES)

    answer = httpx.get(f"{proxy.base_url}/responses/{damaged}", timeout=10,
                       headers={"Authorization": f"Bearer {API_KEY}"})
    # Unknown where it was made, it goes where a request without a model goes: `fake`, which
    # never made it. Its own 404, not the proxy's 500.
    assert answer.status_code == 404, answer.text
    assert [r.path for r in main.requests] == [f"/v1/responses/{damaged}"]
    [warning] = proxy.logs.events("origin_not_read")
    assert warning["level"] == "warning" and warning["error"] == "StateDamaged"
    assert "thread" not in warning  # it belongs to no thread
    assert len(proxy.logs.events("state_damaged")) == 1
    _assert_served_without_crash(proxy)

    # The rows on sound pages still route where they were made.
    assert httpx.get(f"{proxy.base_url}/responses/{sound}", timeout=10).status_code == 404
    assert [r.path for r in other.requests] == [f"/v1/responses/{sound}"]
    assert len(proxy.logs.events("origin_not_read")) == 1


def test_an_origin_the_closed_store_refuses_is_a_warning_and_the_answer_stands(
        loop_thread: LoopThread, make_fake: Callable[..., FakeUpstream],
        make_proxy: Callable[..., RunningProxy]) -> None:
    main, other = make_fake(), make_fake()
    # No thread (fallback none, no header): the request itself needs no state.
    proxy = make_proxy(main, threads={"fallback": "none"},
                       upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    loop_thread.run(proxy.app[SERVICES].pipeline.store.close())

    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=10)
    with client:
        made = client.chat.completions.create(model="claude-sonnet", messages=USER, store=True)
        assert made.choices[0].message.content
        [warning] = proxy.logs.events("origin_not_recorded")
        assert warning["level"] == "warning" and warning["error"] == "StoreError"
        # Still remembered in memory: the stored completion is found where it was made.
        assert client.chat.completions.retrieve(made.id).id == made.id
    assert [r.method for r in other.requests] == ["POST", "GET"] and main.requests == []
    _assert_served_without_crash(proxy)


def test_an_origin_write_the_full_disk_loses_is_counted_as_a_lost_write(
        loop_thread: LoopThread, make_fake: Callable[..., FakeUpstream],
        make_proxy: Callable[..., RunningProxy]) -> None:
    main, other = make_fake(), make_fake()
    proxy = make_proxy(main, threads={"fallback": "none"},
                       upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    store = proxy.app[SERVICES].pipeline.store.store

    def fill_the_disk() -> None:  # the database may not grow by a page: SQLITE_FULL
        conn = store._require_db().conn
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        for size in (200, 40, 0):  # and its pages full, to the last small row
            try:
                for n in range(10_000):
                    conn.execute("INSERT INTO origins VALUES (?, 'fake', ?)",
                                 (f"filler-{size}-{n:05d}" + "f" * size, time.time()))
            except sqlite3.OperationalError as full:
                assert full.sqlite_errorname == "SQLITE_FULL"

    loop_thread.run(store._run(fill_the_disk))
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=10)
    made: list[Any] = []
    with client:
        for _ in range(3):
            made.append(client.chat.completions.create(
                model="claude-sonnet", messages=USER, store=True))
        loop_thread.run(store.flush())
    # Queued, the write fails after the answer went out: told as lost writes are.
    [lost] = proxy.logs.events("state_write_failed")
    assert lost["error"] == "OperationalError" and lost["sqlite_error"] == "SQLITE_FULL"
    assert not proxy.logs.events("origin_not_recorded")
    assert all(answer.choices[0].message.content for answer in made)
    _assert_served_without_crash(proxy)
