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


async def test_without_limit_the_100_most_recently_active_are_listed_newest_first(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state")
    await store.open()
    # Made in an order other than their activity: the listing sorts by last activity.
    for n in (*range(0, 103, 2), *range(1, 103, 2)):
        store.record_request(ThreadKey("tenant-a", f"t{n:03d}"), 1000.0 + n, n)
    await store.close()
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    newest_first = [f"t{n:03d}" for n in range(102, -1, -1)]

    default = cli("threads", "--config", str(config))
    assert default.returncode == 0, default.stderr
    assert _listed(default.stdout) == newest_first[:100]
    larger = cli("threads", "--limit", "101", "--config", str(config))
    assert _listed(larger.stdout) == newest_first[:101]
    every = cli("threads", "--limit", "500", "--config", str(config))
    assert _listed(every.stdout) == newest_first


def _listed(stdout: str) -> list[str]:
    header, *rows = stdout.splitlines()
    assert header.split()[-1] == "THREAD"
    return [row.split()[-1] for row in rows]
