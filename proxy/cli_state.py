"""`compaction-proxy threads` and `inspect`: the operator's view of the stored state.

Both open the state database read-side while the proxy may be running (SQLite WAL allows
concurrent readers) and print; they never write.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict
from typing import Any

import orjson

from proxy.records import ThreadState
from proxy.settings import Settings
from proxy.store import create_store, thread_key_text


def list_threads(settings: Settings, limit: int) -> int:
    summaries = asyncio.run(_with_store(settings, lambda store: store.list_threads(limit)))
    if not summaries:
        print(f"no threads in {settings.state.path}")
        return 0
    rows = [("THREAD", "TENANT", "LAST ACTIVITY", "EVENTS", "LAST ESTIMATE")]
    for s in summaries:
        rows.append((_short(s.thread), s.tenant[:12], _when(s.last_activity), str(s.event_count),
                     "-" if s.last_estimate is None else str(s.last_estimate)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def inspect_thread(settings: Settings, thread_id: str) -> int:
    states = asyncio.run(_with_store(settings, lambda store: store.find(thread_key_text(thread_id))))
    if not states:
        print(f"no thread {thread_id!r} in {settings.state.path}", file=sys.stderr)
        return 1
    out = [state_as_data(state) for state in states]
    sys.stdout.write(orjson.dumps(out if len(out) > 1 else out[0],
                                  option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def state_as_data(state: ThreadState) -> dict[str, Any]:
    data = asdict(state)
    data["key"] = {"tenant": state.key.tenant, "thread": state.key.thread}
    data.pop("extra", None)
    return data


async def _with_store(settings: Settings, action: Any) -> Any:
    store = create_store(settings.state)
    await store.open()
    try:
        return await action(store)
    finally:
        await store.close()


def _short(thread: str) -> str:
    return thread if len(thread) <= 40 else thread[:37] + "..."


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
