"""The history on Redis (`proxy/store/redis_history.py`) on a real server: its key layout, its
lines, its failures as `OSError`s the compactor records, and a compaction that offloads to it."""

from __future__ import annotations

import asyncio
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from proxy.records import CompactionEvent, ThreadKey
from proxy.server.compactor import Compactor
from proxy.server.pipeline import Pipeline
from proxy.settings import RedisSettings, StateSettings
from proxy.store import HistoryFiles, SqliteStore, create_history, jsoncodec
from proxy.store.redis_history import RedisHistory, RedisHistoryError
from tests.redis_fixtures import redis_client as raw, redis_history as history  # noqa: F401
from tests.redis_server import start_redis_server, stop_redis_server
from tests.test_history_both import HOSTILE_IDS, message
from tests.test_properties_history_private import KEY, SETTINGS, _job, _Log, _Store, _Summarizer


async def _keys(raw: aioredis.Redis, prefix: str) -> list[str]:
    return sorted([k.decode() async for k in raw.scan_iter(match=prefix + "*")])


async def test_keys_are_the_prefix_and_a_digest_whatever_the_ids(
        history: RedisHistory, raw: aioredis.Redis, redis_prefix: str, tmp_path: Path) -> None:
    files = HistoryFiles(tmp_path)
    for raw_id in HOSTILE_IDS:
        for key in (ThreadKey("tenant-a", raw_id), ThreadKey(raw_id, "thread")):
            appended = await history.offload_async(key, [message(1)])
            digest = files.path_for(key).stem  # the same digest names the file and the list
            assert appended.path == f"redis:{redis_prefix}h:{digest}"
    keys = await _keys(raw, redis_prefix)
    assert len(keys) == 2 * len(HOSTILE_IDS)
    assert all(re.fullmatch(re.escape(redis_prefix) + "h:[0-9a-f]{64}", k) for k in keys)


async def test_each_element_is_a_line_of_the_files_form(history: RedisHistory,
                                                       raw: aioredis.Redis, tmp_path: Path) -> None:
    records = [message(1), {"role": "tool", "content": "x\ud800"}]
    appended = await history.offload_async(KEY, records, at=12.5)
    files = HistoryFiles(tmp_path)
    path = files.offload(KEY, records, at=12.5).path
    values = await raw.lrange(appended.path.removeprefix("redis:"), 0, -1)
    assert [list(jsoncodec.loads(v)) for v in values] == [["seq", "at", "record"]] * 2
    assert [jsoncodec.loads(v) for v in values] == [jsoncodec.loads(line) for line in
                                                    Path(path).read_bytes().splitlines()]


async def test_positions_count_lines(history: RedisHistory, raw: aioredis.Redis) -> None:
    first = await history.offload_async(KEY, [message(1), message(2), message(3)])
    second = await history.offload_async(KEY, [message(4)])
    assert (first.start, first.end, second.start, second.end) == (0, 3, 3, 4)
    assert first.lines_before == 0 and second.lines_before == 3
    name = first.path.removeprefix("redis:")
    tail = await raw.lrange(name, 1, -1)
    found = await history.discard_tail_async(KEY, 1)
    assert (found.size, found.lines, found.bytes) == (1, 3, sum(map(len, tail)))
    assert await raw.llen(name) == 1


async def test_a_damaged_line_is_reported_not_raised(history: RedisHistory,
                                                     raw: aioredis.Redis) -> None:
    appended = await history.offload_async(KEY, [message(1)])
    name = appended.path.removeprefix("redis:")
    await raw.rpush(name, b'{"seq": 2, "at"', b"[1]", b"")  # written by something else
    await history.offload_async(KEY, [message(5)])
    contents = await history.read_async(appended.path)
    assert contents.damaged_lines == (2, 3, 4)
    assert [(r["seq"], r["record"]) for r in contents.records] == [(1, message(1)),
                                                                  (5, message(5))]


async def test_a_long_offload_is_one_whole_append(history: RedisHistory) -> None:
    records = [message(n) for n in range(2500)]  # past the script's push chunk of 1,000
    appended = await history.offload_async(KEY, records, at=1.0)
    assert (appended.start, appended.end) == (0, 2500)
    contents = await history.read_async(appended.path)
    assert [(r["seq"], r["record"]) for r in contents.records] == list(
        zip(range(1, 2501), records))
    assert await history.retract_async(appended)
    assert (await history.read_async(appended.path)).records == []


def test_create_history_picks_the_backend(tmp_path: Path) -> None:
    assert isinstance(create_history(StateSettings(path=str(tmp_path))), HistoryFiles)
    made = create_history(StateSettings(backend="redis", redis=RedisSettings(prefix="p:")))
    assert isinstance(made, RedisHistory) and made.path_for(KEY).startswith("redis:p:h:")


async def test_without_the_redis_package_open_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    monkeypatch.setitem(sys.modules, "proxy.store.redis_connection", None)
    history = RedisHistory(RedisSettings())
    with pytest.raises(RedisHistoryError, match=re.escape("pip install 'compaction-proxy[redis]'")):
        await history.open()


async def test_failures_are_os_errors_naming_the_server_without_its_password() -> None:
    server = start_redis_server()
    stop_redis_server(server)  # a port nobody listens on now
    url = f"redis://user:s3cret-pw@127.0.0.1:{server.port}/0"
    history = RedisHistory(RedisSettings(url=url, timeout_s=1.0))
    with pytest.raises(OSError) as refused:
        await history.open()
    text = str(refused.value)
    assert f"127.0.0.1:{server.port}" in text and "s3cret-pw" not in text and "***" in text
    with pytest.raises(OSError, match="not open"):
        await history.offload_async(KEY, [message(1)])


async def test_a_server_gone_mid_run_fails_each_call_with_an_os_error() -> None:
    server = start_redis_server()
    history = RedisHistory(RedisSettings(url=server.url, timeout_s=1.0))
    try:
        await history.open()
        appended = await history.offload_async(KEY, [message(1)])
    finally:
        stop_redis_server(server)
    for call in (history.offload_async(KEY, [message(2)]), history.retract_async(appended),
                 history.discard_tail_async(KEY, 0), history.read_async(appended.path)):
        with pytest.raises(RedisHistoryError):
            await call
    await history.close()


# ------------------------------------------------------------------ through the compactor

CHAT = [{"role": "system", "content": "Be brief."}] + [
    {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "words " * 40}
    for n in range(12)]


async def _compacted(history: RedisHistory, store: _Store) -> CompactionEvent:
    compactor = Compactor(SETTINGS, _Summarizer(), store,  # type: ignore[arg-type]
                          history, _Log(), None)
    return await compactor.compact(_job("chat", CHAT, "partial", 2, None))


async def test_a_checkpoint_points_at_the_list_holding_the_summarized_messages(
        history: RedisHistory) -> None:
    event = await _compacted(history, _Store())
    contents = await history.read_async(event.history_file)
    offloaded = [line["record"]["message"] for line in contents.records]
    assert offloaded and offloaded == CHAT[1:event.cutoff_index]
    assert event.history_file == history.path_for(KEY) and event.history_end == len(offloaded)
    await history.offload_async(KEY, [message(99)])  # an attempt killed before its checkpoint
    again = await _compacted(history, _Store([event]))
    lines = (await history.read_async(again.history_file)).records
    assert again.history_end == len(lines) > event.history_end
    assert lines[:event.history_end] == contents.records
    assert {"record": message(99)} not in [{"record": line["record"]} for line in lines]


async def test_a_checkpoint_that_cannot_be_written_takes_its_lines_back(
        history: RedisHistory) -> None:
    committed = await _compacted(history, _Store())

    class Refusing(_Store):
        async def add_event(self, key: ThreadKey, written: CompactionEvent) -> CompactionEvent:
            raise RuntimeError("the store is gone")

    with pytest.raises(Exception, match="checkpoint"):
        await _compacted(history, Refusing([replace(committed, cutoff_index=3)]))
    contents = await history.read_async(committed.history_file)
    assert len(contents.records) == committed.history_end


async def test_an_offload_the_server_refuses_is_recorded_and_the_summary_kept() -> None:
    server = start_redis_server()
    history = RedisHistory(RedisSettings(url=server.url, timeout_s=1.0))
    await history.open()
    stop_redis_server(server)
    try:
        event = await _compacted(history, _Store())
    finally:
        await history.close()
    assert event.history_file is None and event.history_end == 0
    assert event.offload_error and "RedisHistoryError" in event.offload_error


# ------------------------------------------------------------------ lifecycle and timeouts


async def test_the_pipeline_opens_and_closes_the_history(tmp_path: Path, redis_url: str,
                                                         redis_prefix: str) -> None:
    settings = RedisSettings(url=redis_url, prefix=redis_prefix)
    history = RedisHistory(settings)
    pipeline = Pipeline(SETTINGS, store=SqliteStore(tmp_path / "state"), history=history)
    await pipeline.start()
    try:
        await history.offload_async(KEY, [message(1)])
    finally:
        await pipeline.stop()
    with pytest.raises(OSError, match="not open"):
        await history.offload_async(KEY, [message(2)])


async def test_a_history_that_cannot_open_stops_the_start_and_closes_the_store(
        tmp_path: Path) -> None:
    server = start_redis_server()
    stop_redis_server(server)
    history = RedisHistory(RedisSettings(url=server.url, timeout_s=1.0))
    pipeline = Pipeline(SETTINGS, store=SqliteStore(tmp_path / "state"), history=history)
    with pytest.raises(OSError):
        await pipeline.start()
    again = SqliteStore(tmp_path / "state")  # the first one let go of the directory
    await again.open()
    await again.close()


# Holds the server for `ARGV[1]` seconds: every command sent meanwhile waits behind it.
_BUSY = """
local start = redis.call('TIME')
local now = start
while (now[1] - start[1]) * 1e6 + (now[2] - start[2]) < tonumber(ARGV[1]) * 1e6 do
  now = redis.call('TIME')
end
return 1
"""


async def test_an_offload_that_times_out_is_never_sent_again() -> None:
    server = start_redis_server()
    other = aioredis.Redis.from_url(server.url)
    history = RedisHistory(RedisSettings(url=server.url, timeout_s=0.3))
    try:
        await history.open()
        busy = asyncio.create_task(other.eval(_BUSY, 0, 1.0))
        await asyncio.sleep(0.1)
        with pytest.raises(OSError, match="Timeout"):  # the server runs it once it is free
            await history.offload_async(KEY, [message(1), message(2)])
        await busy
        await asyncio.sleep(0.5)
        name = history.list_for(KEY)
        assert await other.llen(name) == 2, "an offload whose answer was lost ran twice"
    finally:
        await history.close()
        await other.aclose()
        stop_redis_server(server)
