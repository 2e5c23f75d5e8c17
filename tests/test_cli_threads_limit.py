"""`threads --limit N` takes any positive N: one beyond SQLite's integers means every thread,
not a traceback."""

from __future__ import annotations

from pathlib import Path

from proxy.records import ThreadKey
from proxy.store import SqliteStore
from tests.process import cli, write_config


async def test_a_limit_beyond_any_count_lists_every_thread(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state")
    await store.open()
    for n, thread in enumerate(("t1", "t2")):
        store.record_request(ThreadKey("tenant-a", thread), 1000.0 + n, 100)
    await store.close()
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    result = cli("threads", "--limit", str(10 ** 30), "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert [line.split()[-1] for line in result.stdout.splitlines()[1:]] == ["t2", "t1"]
