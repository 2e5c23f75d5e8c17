"""Both state backends behind one fixture, for the tests of what every store guarantees.

`any_store` is an open store: a `SqliteStore` on a temporary directory, or a `RedisStore` on
the test process's real Redis server under a key prefix of the test's own. `LogLines` stands
in for the store's logger and keeps what it was told.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey
from proxy.store import SqliteStore, StateStore
from proxy.store.redis_store import RedisStore

KEY = ThreadKey("tenant-a", "thread-1")
HOSTILE_IDS = [
    "x" * 10_240, "../../etc/passwd", "..", "/", "a\x00b", "\x00",
    b"id-\xff\xfe\x80".decode("utf-8", "surrogateescape"), "\ud800", "\udfff tail",
    "😀 日本語 \u202e", "", " ", "\r\n", "~", "~" + "0" * 64, "C:\\con\\aux", "*", "{a}",
]


def anchor(n: int, at: float | None = None) -> Anchor:
    return Anchor(response_digests=(f"r{n}", f"s{n}"), position=n, prefix_digest=f"p{n}",
                  input_tokens=1000 + n, output_tokens=10, cached_tokens=500,
                  reasoning_tokens=3, model="gpt-4o",
                  created_at=100.0 + n if at is None else at)


def event(n: int, content: str = "summary", at: float | None = None) -> CompactionEvent:
    return CompactionEvent(
        cutoff_index=n, cutoff_message_id=f"m{n}", prefix_digest=f"d{n}",
        summary_message={"role": "user", "content": f"{content} {n}"},
        restore_messages=({"role": "user", "content": "keep going"},),
        history_file="/data/history/x.jsonl", strategy="partial", tokens_before=9000,
        tokens_after=3000, created_at=200.0 + n if at is None else at, model="gpt-4o",
        summarizer_model="mini", api="responses", offload_error=None, trigger=7000)


def mark(n: int) -> MicrocompactMark:
    return MicrocompactMark(through_message_id=f"m{n}", through_index=n, created_at=300.0 + n)


class LogLines:
    """A logger that keeps (level, event, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for _, name, fields in self.lines if name == event]

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            self.lines.append((level, event, fields))
        return log


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest,
               **options: Any) -> StateStore:
    if kind == "sqlite":
        return SqliteStore(tmp_path / "state", **options)
    return RedisStore(request.getfixturevalue("redis_url"),
                      prefix=request.getfixturevalue("redis_prefix"), **options)


@pytest.fixture(params=["sqlite", "redis"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    store = make_store(request.param, tmp_path, request)
    await store.open()
    yield store
    await store.close()


async def reopened(store: StateStore) -> StateStore:
    """A new store on the same state, `store` closed."""
    await store.close()
    if isinstance(store, SqliteStore):
        again: StateStore = SqliteStore(store.root)
    else:
        assert isinstance(store, RedisStore)
        again = RedisStore(store.url, prefix=store.keys.prefix)
    await again.open()
    return again
