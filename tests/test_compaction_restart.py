"""Killing the proxy around compactions: checkpoints are whole or absent, never redone, and
history lines are never offloaded twice."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

from proxy.store import HistoryFiles
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.process import ProxyProcess, assert_sound_database, write_config


def _turn_points(messages: list[dict]) -> list[int]:
    return [k for k in range(1, len(messages)) if messages[k]["role"] == "assistant"]


def _send(base_url: str, fake, messages: list[dict], k: int) -> httpx.Response:
    fake.script(Reply.repeating(messages[k]))
    return httpx.post(f"{base_url}/chat/completions", timeout=60,
                      headers={"x-thread-id": "restart", "authorization": "Bearer sk-restart"},
                      content=orjson.dumps({"model": MODEL, "messages": messages[:k]}))


def _events(state: Path) -> list[dict]:
    assert_sound_database(state / "state.db")
    database = sqlite3.connect(state / "state.db")
    try:
        tables = {r[0] for r in database.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        table = next(t for t in tables if "event" in t)
        return [dict(zip([c[0] for c in database.execute(f"SELECT * FROM {table}").description], row))
                for row in database.execute(f"SELECT * FROM {table}")]
    finally:
        database.close()


def _session(tmp_path: Path, make_fake, **summarizer: Any):  # type: ignore[no-untyped-def]
    """A fake upstream with the fake summarizer, a proxy config on `tmp_path/state`, and a
    planted session with its turn points."""
    fake = make_fake(limits={"small-*": LIMIT})
    installed = FakeSummarizer.install(fake, **summarizer)
    state = tmp_path / "state"
    config = write_config(tmp_path / "p.yaml", fake.url, state,
                          models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    return fake, installed, state, config, messages, _turn_points(messages)


def _kill_when(proxy: ProxyProcess, fake, messages: list[dict[str, Any]], points: list[int],
               reached: Callable[[], bool], settle_s: float = 0.0) -> int:
    """Send turns, each from a thread, until `reached` while one is in flight; SIGKILL the
    proxy then (after `settle_s`) and return the index of the turn that was cut."""
    for n, k in enumerate(points):
        worker = threading.Thread(target=_try, args=(
            lambda k=k: _send(proxy.base_url, fake, messages, k),))
        worker.start()
        deadline = time.monotonic() + 30
        while worker.is_alive() and not reached() and time.monotonic() < deadline:
            time.sleep(0.01)
        if reached():
            time.sleep(settle_s)
            proxy.kill()
            worker.join(30)
            return n
        worker.join(30)
    raise AssertionError("the session never compacted")


def test_kills_during_a_summary_and_between_turns(tmp_path: Path, make_fake) -> None:
    fake, summarizer, state, config, messages, points = _session(tmp_path, make_fake, hang=1)

    # 1. Kill the proxy while its summarizer call is in flight.
    proxy = ProxyProcess(config)
    try:
        # SIGKILL, mid-summary.
        stopped_at = _kill_when(proxy, fake, messages, points, lambda: summarizer.calls > 0,
                                settle_s=0.2)
    finally:
        proxy.kill()
    assert _events(state) == [], "no checkpoint from a summary that never finished"

    # 2. Restart: the same turn compacts (the summarizer runs again, once).
    proxy = ProxyProcess(config)
    try:
        assert _send(proxy.base_url, fake, messages, points[stopped_at]).status_code == 200
        assert summarizer.calls >= 2
        completed = proxy.wait_for("compaction_completed")
        time.sleep(0.1)
        proxy.kill()  # SIGKILL, between turns
    finally:
        proxy.kill()
    events = _events(state)
    assert len(events) == 1
    calls = summarizer.calls

    # 3. Restart again: the checkpoint is applied, nothing is summarized again.
    proxy = ProxyProcess(config)
    try:
        answer = _send(proxy.base_url, fake, messages, points[stopped_at + 1])
        assert answer.status_code == 200
        assert answer.headers["x-compaction"] == "applied"
        assert summarizer.calls == calls
    finally:
        proxy.kill()

    history = Path(completed[0]["history_file"])
    assert history.exists() and history.parent.parent == state
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "restart" not in history.name, "a thread id never becomes a file name"
    contents = HistoryFiles.under(state).read(history)
    assert contents.records and not contents.torn
    offloaded = [line["record"]["message"] for line in contents.records]
    assert offloaded[0]["role"] == "user"
    assert not any("reasoning_content" in m for m in offloaded)


def _try(call):  # type: ignore[no-untyped-def]
    try:
        return call()
    except httpx.HTTPError as error:
        return error


# ------------------------------------------------------------ the history file across kills

# The child's `HistoryFiles.offload` stops once its lines are fsynced, so the checkpoint is
# never written: the test SIGKILLs the process in that window.
STOP_AFTER_OFFLOAD = """
import sys, time
import orjson
from proxy.store.history import HistoryFiles
offload = HistoryFiles.offload

def offload_then_stop(self, *args, **kwargs):
    appended = offload(self, *args, **kwargs)
    sys.stdout.write(orjson.dumps({"event": "test_offloaded", "end": appended.end}).decode() + "\\n")
    sys.stdout.flush()
    time.sleep(3600)

HistoryFiles.offload = offload_then_stop
"""


def _history(state: Path) -> tuple[Path, list[dict]]:
    """The one history file and its lines (whole ones only; a torn line fails the test)."""
    files = list((state / "history").glob("*.jsonl"))
    assert len(files) == 1, files
    contents = HistoryFiles.under(state).read(files[0])
    assert not contents.torn
    return files[0], contents.records


def _compact(proxy: ProxyProcess, fake, messages: list[dict], points: list[int],
             count: int = 1) -> int:
    """Send turns until the proxy logged `count` compactions; returns how many it sent."""
    for n, k in enumerate(points, start=1):
        assert _send(proxy.base_url, fake, messages, k).status_code == 200
        if len(proxy.events("compaction_completed")) >= count:
            return n
    raise AssertionError("the session never compacted")


def test_a_kill_between_the_offload_and_the_checkpoint_leaves_no_duplicate_lines(
        tmp_path: Path, make_fake) -> None:
    fake, _, state, config, messages, points = _session(tmp_path, make_fake)

    # 1. The first compaction offloads, and the process is killed before its checkpoint.
    proxy = ProxyProcess(config, prelude=STOP_AFTER_OFFLOAD)
    try:
        stopped_at = _kill_when(proxy, fake, messages, points,
                                lambda: bool(proxy.events("test_offloaded")))
    finally:
        proxy.kill()
    assert _events(state) == [], "no checkpoint: the kill came before it"
    path, left = _history(state)
    left_bytes = path.stat().st_size
    assert left and left_bytes == proxy.events("test_offloaded")[0]["end"]

    # 2. Restart: the same turn compacts again, over the lines the kill left.
    proxy = ProxyProcess(config)
    try:
        assert _send(proxy.base_url, fake, messages, points[stopped_at]).status_code == 200
        proxy.wait_for("compaction_completed")
        _, once = _history(state)
        once_bytes = path.stat().st_size
        # 3. The thread goes on to a second compaction: the committed lines stay.
        _compact(proxy, fake, messages, points[stopped_at + 1:], count=2)
        discarded = proxy.events("history_tail_discarded")
    finally:
        proxy.kill()
    assert [r["record"] for r in once] == [r["record"] for r in left], "offloaded once"
    assert [(d["lines"], d["bytes"], d["kept_bytes"]) for d in discarded] == [
        (len(left), left_bytes, 0)]
    _, lines = _history(state)
    ids = [r["record"]["id"] for r in lines]
    assert len(ids) == len(set(ids)), "a message offloaded twice"
    assert [r["seq"] for r in lines] == list(range(1, len(lines) + 1))
    assert lines[:len(once)] == once and len(lines) > len(once)
    ends = [orjson.loads(e["data"])["history_end"] for e in _events(state)]
    assert ends == [once_bytes, path.stat().st_size]


def test_a_checkpoint_stored_without_its_history_end_still_loads_and_cuts_nothing(
        tmp_path: Path, make_fake) -> None:
    fake, summarizer, state, config, messages, points = _session(tmp_path, make_fake)
    proxy = ProxyProcess(config)
    try:
        sent = _compact(proxy, fake, messages, points)
    finally:
        proxy.kill()

    # The checkpoint as an older proxy stored it, and a line no checkpoint may account for.
    database = sqlite3.connect(state / "state.db")
    try:
        (data,) = database.execute("SELECT data FROM events").fetchone()
        old = {k: v for k, v in orjson.loads(data).items() if k != "history_end"}
        with database:
            database.execute("UPDATE events SET data = ?", (orjson.dumps(old).decode(),))
    finally:
        database.close()
    path, committed = _history(state)
    stray = orjson.dumps({"seq": len(committed) + 1, "at": 1.0, "record": {"id": "stray"}})
    with path.open("ab") as f:
        f.write(stray + b"\n")

    proxy = ProxyProcess(config)
    try:
        calls = summarizer.calls
        answer = _send(proxy.base_url, fake, messages, points[sent])
        assert answer.status_code == 200 and answer.headers["x-compaction"] == "applied"
        assert summarizer.calls == calls, "the old checkpoint is used, not summarized again"
        _compact(proxy, fake, messages, points[sent + 1:])
        assert proxy.events("history_tail_discarded") == []
    finally:
        proxy.kill()
    _, lines = _history(state)
    assert lines[:len(committed)] == committed and lines[len(committed)]["record"] == {"id": "stray"}
    ends = [orjson.loads(e["data"]).get("history_end") for e in _events(state)]
    assert ends == [None, path.stat().st_size]
