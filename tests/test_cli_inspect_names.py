"""`inspect` names a thread's parts as the README and the `threads` table do: its latest
`checkpoint` and how many `checkpoints` it has had, not the records' internal field names."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.cli_state import state_as_data
from proxy.records import CompactionEvent, ThreadKey, ThreadState
from proxy.store import SqliteStore
from tests.process import cli, write_config

SUMMARY = {"role": "user", "content": "summary"}


def test_the_latest_checkpoint_and_the_count_are_named_for_what_they_are() -> None:
    event = CompactionEvent(3, "m3", "v1:d", SUMMARY)
    data = state_as_data(ThreadState(ThreadKey("t", "x"), 1.0, 2.0, event=event, event_count=2))
    assert list(data) == ["key", "created_at", "last_activity", "anchors", "checkpoint",
                          "checkpoints", "microcompact", "last_estimate"]
    assert data["checkpoint"]["summary_message"] == SUMMARY and data["checkpoints"] == 2


async def test_inspect_prints_the_checkpoint_under_that_name(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "state")
    await store.open()
    key = ThreadKey("tenant-a", "t1")
    store.record_request(key, 1000.0, 100)
    await store.add_event(key, CompactionEvent(3, "m3", "v1:d", SUMMARY))
    await store.close()
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    result = cli("inspect", "t1", "--config", str(config))
    assert result.returncode == 0, result.stderr
    [state] = json.loads(result.stdout)
    assert state["checkpoint"]["cutoff_message_id"] == "m3" and state["checkpoints"] == 1
    assert "event" not in state and "event_count" not in state
