"""A client chooses its model's and its tools' names, of any length (up to `max_body_mb`).
What the proxy keeps per name (estimators and thresholds by model, the tool-name matches, the
summarizer's breakers, retry lessons, the model on each stored anchor) keeps a long name in a
bounded form: 4,096 names of a megabyte each were held in memory for good, and every anchor
stored its megabyte (a security audit: 91 -> 421 MB RSS, 100 MB of state per 50 requests)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import orjson

from proxy.compaction.breaker import breaker_key
from proxy.core import tool_names
from proxy.settings import parse_settings
from proxy.server.estimators import Estimators
from proxy.server.retry_lessons import RetryLessons
from proxy.compaction.overflow import Retry, RetryAction
from proxy.records import ThreadKey
from proxy.store.keys import MAX_KEPT_CHARS, kept_name
from proxy.testing.replies import Reply

LONG = "gpt-4o-" + "x" * 200_000


def test_a_long_name_is_kept_as_a_digest_and_a_usual_one_as_it_is() -> None:
    assert kept_name("gpt-4o-mini") == "gpt-4o-mini"
    kept = kept_name(LONG)
    assert kept.startswith("~") and len(kept) <= MAX_KEPT_CHARS and kept == kept_name(LONG)
    assert kept != kept_name(LONG + "y")


def test_estimators_do_not_keep_a_long_model_name() -> None:
    estimators = Estimators(parse_settings({"upstreams": {"u": {"base_url": "http://h/v1"}}}, {}))
    assert estimators.estimator(LONG) is estimators.estimator("gpt-4o-1")  # the same tokenizer
    estimators.thresholds(LONG, 0)
    assert all(len(model) <= MAX_KEPT_CHARS for model in estimators._by_model)
    assert all(len(model) <= MAX_KEPT_CHARS for model, _ in estimators._thresholds_by)


def test_tool_name_matches_cache_no_long_name() -> None:
    before = tool_names._named.cache_info().currsize
    assert tool_names.named("read_file" + "x" * 100_000, ("read_file*",))
    assert not tool_names.named("y" * 100_000, ("read_file",))
    assert tool_names._named.cache_info().currsize == before


def test_breakers_and_lessons_key_a_long_model_by_its_digest() -> None:
    assert breaker_key(LONG, "up") == ("up", kept_name(LONG))
    lessons = RetryLessons()
    key = ThreadKey("tenant", "thread")
    fix = Retry(RetryAction.STRIP_BLOBS, "test")
    lessons.learn(key, LONG, fix)
    assert all(len(model) <= MAX_KEPT_CHARS for _, model in lessons._learned)
    assert lessons.lesson(key, LONG) == fix
    lessons.forget(key, LONG)
    assert lessons.lesson(key, LONG) is None


def test_a_stored_anchor_keeps_a_long_model_name_bounded(fake, make_proxy, tmp_path: Path) -> None:
    state = tmp_path / "state"
    # A context past half the trigger (450): its anchor is written, not kept in memory alone.
    proxy = make_proxy(fake, state_path=str(state), models={"*": {"max_input_tokens": 600}})
    fake.script(Reply.text("ok"))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                        content=orjson.dumps({"model": LONG, "messages": [
                            {"role": "user", "content": "hi " * 300}]}),
                        headers={"content-type": "application/json", "x-thread-id": "long",
                                 "authorization": "Bearer sk-t"})
    assert answer.status_code == 200
    rows: list[tuple[str]] = []
    deadline = time.monotonic() + 10
    while not rows:  # the store writes its queued anchors within 50 ms
        assert time.monotonic() < deadline
        with sqlite3.connect(state / "state.db") as conn:
            rows = conn.execute("SELECT data FROM anchors").fetchall()
        time.sleep(0.05)
    [(data,)] = rows
    assert orjson.loads(data)["model"] == kept_name(LONG) and len(data) < 2000
