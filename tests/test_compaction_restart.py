"""Killing the proxy around compactions: checkpoints are whole or absent, never redone."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from pathlib import Path

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


def test_kills_during_a_summary_and_between_turns(tmp_path: Path, make_fake) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, hang=1)
    state = tmp_path / "state"
    config = write_config(tmp_path / "p.yaml", fake.url, state,
                          models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    points = _turn_points(messages)

    # 1. Kill the proxy while its summarizer call is in flight.
    proxy = ProxyProcess(config)
    outcome: dict[str, object] = {}
    try:
        for n, k in enumerate(points):
            worker = threading.Thread(target=lambda k=k: outcome.update(
                {"answer": _try(lambda: _send(proxy.base_url, fake, messages, k))}))
            worker.start()
            deadline = time.monotonic() + 30
            while worker.is_alive() and summarizer.calls == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            if summarizer.calls:
                time.sleep(0.2)
                proxy.kill()  # SIGKILL, mid-summary
                worker.join(30)
                stopped_at = n
                break
            worker.join(30)
        else:
            raise AssertionError("the session never compacted")
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
