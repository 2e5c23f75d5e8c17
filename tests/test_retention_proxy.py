"""Retention through the real proxy and the official `openai` client: a thread idle past
`state.retention_days` is swept when the proxy starts, and when its client comes back it
starts afresh and is compacted again like a new one; with 0 it is kept.

The 40 idle days are written into the stopped proxy's state (its times moved back), so both
proxies run on the real clock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import openai

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.conftest import API_KEY
from tests.harness import LoopThread, RunningProxy, proxy_settings, start_proxy, stop_proxy

DAY = 86_400.0
GONE, STAYS = "comes-back-later", "used-yesterday"


def sessions(tmp_path: Path, make_fake: Callable[..., Any]) -> tuple[Any, Any]:
    fake = make_fake(limits={"small-*": LIMIT})
    return fake, FakeSummarizer.install(fake)


def turn(client: openai.OpenAI, fake: Any, messages: list[dict[str, Any]], k: int,
         thread: str) -> Any:
    fake.script(Reply.repeating(messages[k]))
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages[:k], extra_headers={"x-thread-id": thread})


def compacted_once(proxy: RunningProxy, client: openai.OpenAI, fake: Any,
                   messages: list[dict[str, Any]], thread: str) -> int:
    """Turns of `thread` until its first compaction; the index of the next turn."""
    points = [k for k in range(1, len(messages)) if messages[k]["role"] == "assistant"]
    for k in points:
        assert turn(client, fake, messages, k, thread).http_response.status_code == 200
        if [e for e in proxy.logs.events("compaction_completed") if e["thread"] == thread]:
            return next(p for p in points if p > k)
    raise AssertionError("the session never compacted")


def aged(state: Path, thread: str, days: float) -> None:
    """Move every time the thread's rows hold `days` back, as if it had been idle that long."""
    with closing(sqlite3.connect(state / "state.db")) as conn, conn:
        shift = days * DAY
        conn.execute("UPDATE threads SET last_activity = last_activity - ?, "
                     "created_at = created_at - ? WHERE thread = ?", (shift, shift, thread))
        conn.execute("UPDATE anchors SET created_at = created_at - ? WHERE thread = ?",
                     (shift, thread))


def rows_of(state: Path, thread: str) -> int:
    with closing(sqlite3.connect(state / "state.db")) as conn:
        return sum(conn.execute(f"SELECT count(*) FROM {table} WHERE thread = ?",
                                (thread,)).fetchone()[0]
                   for table in ("threads", "anchors", "events"))


def wait_for(proxy: RunningProxy, event: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = proxy.logs.events(event)
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no {event} line")


def test_an_idle_thread_is_swept_at_start_and_comes_back_fresh(
        tmp_path: Path, loop_thread: LoopThread, make_fake: Callable[..., Any]) -> None:
    fake, summarizer = sessions(tmp_path, make_fake)
    state = tmp_path / "state"
    settings = proxy_settings(fake.url, str(state), models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    proxy = loop_thread.run(start_proxy(settings))
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=30)
    try:
        next_turn = compacted_once(proxy, client, fake, messages, GONE)
        turn(client, fake, messages, 2, STAYS)
        [completed] = [e for e in proxy.logs.events("compaction_completed")
                       if e["thread"] == GONE]
    finally:
        loop_thread.run(stop_proxy(proxy))
    history = Path(completed["history_file"])
    size = history.stat().st_size
    aged(state, GONE, 40)
    aged(state, STAYS, 1)
    calls = summarizer.calls

    proxy = loop_thread.run(start_proxy(settings))
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=30)
    try:
        swept = wait_for(proxy, "state_swept")
        assert (swept["threads"], swept["files"], swept["bytes"]) == (1, 1, size)
        assert not history.exists() and rows_of(state, GONE) == 0
        assert rows_of(state, STAYS) > 0

        # The client comes back with its whole conversation: no checkpoint to apply, so the
        # proxy summarizes it again, as the first checkpoint of a new thread, in a new file.
        answer = turn(client, fake, messages, next_turn, GONE)
        assert answer.http_response.status_code == 200
        assert answer.http_response.headers["x-compaction"] == "compacted"
        assert summarizer.calls > calls
        [again] = [e for e in proxy.logs.events("compaction_completed") if e["thread"] == GONE]
        assert again["seq"] == 1 and Path(again["history_file"]) == history
        assert history.exists() and not proxy.logs.events("history_tail_discarded")
        assert turn(client, fake, messages, next_turn + 2, GONE).http_response.status_code == 200
    finally:
        loop_thread.run(stop_proxy(proxy))


def test_zero_days_keeps_an_idle_thread(tmp_path: Path, loop_thread: LoopThread,
                                        make_fake: Callable[..., Any]) -> None:
    fake, _ = sessions(tmp_path, make_fake)
    state = tmp_path / "state"
    settings = proxy_settings(fake.url, str(state), state={"retention_days": 0})
    messages, _ = planted_session(20)
    proxy = loop_thread.run(start_proxy(settings))
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=30)
    try:
        turn(client, fake, messages, 2, GONE)
    finally:
        loop_thread.run(stop_proxy(proxy))
    aged(state, GONE, 4000)
    proxy = loop_thread.run(start_proxy(settings))
    try:
        time.sleep(0.5)  # a sweep, were there one, runs at once
        assert not proxy.logs.events("state_swept") and rows_of(state, GONE) > 0
    finally:
        loop_thread.run(stop_proxy(proxy))
