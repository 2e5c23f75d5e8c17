"""SPEC §9's failures as `/metrics` counts them, so an operator can alert on each: every stage of
`compaction_failed`, the requests forwarded with the cheap stages only, the summarizers' open
breakers, lost state writes and a damaged state, all read from a running proxy."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from proxy.server import breakers
from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session
from tests.test_compaction_failure_paths import between_trigger_and_limit, over_the_limit, post
from tests.test_compaction_detached import COMPACTION, GatedFake, gated  # noqa: F401
from tests.test_compaction_failures import MODELS, NO_CHEAP, _prefix
from tests.test_concurrency_same_thread import second_waits
from tests.test_store_damage import DAMAGED, SOUND, damaged_state

OPENS_AT_ONCE = {**NO_CHEAP, "breaker": {"failures": 1, "base_cooldown_s": 60}}


def scrape(proxy) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of `/metrics`, read by prometheus-client's own parser."""
    text = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def failed(samples: dict, stage: str, strategy: str = "partial") -> float | None:
    return value(samples, "proxy_compactions_total", strategy=strategy, outcome=f"failed_{stage}")


def fill_the_disk(store: Any) -> None:
    """On the store's worker: the database may not grow, and its free pages are taken, so the
    next write that needs room fails with SQLITE_FULL, as on a full disk."""
    conn = store.store._require_db().conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 1}")
    conn.execute("CREATE TABLE filler (data BLOB)")
    with contextlib.suppress(sqlite3.OperationalError):  # until it is full
        while True:
            conn.execute("INSERT INTO filler VALUES (randomblob(512))")


def test_an_open_breaker_is_a_gauge_and_the_requests_it_degrades_are_counted(
        make_fake, make_proxy, monkeypatch) -> None:
    now = [1_000.0]
    monkeypatch.setattr(breakers, "clock", lambda: now[0])
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction=OPENS_AT_ONCE)
    closed = scrape(proxy)
    assert value(closed, "proxy_summarizer_breakers", upstream="fake", state="open") == 0
    between = between_trigger_and_limit()
    for _ in range(3):  # the summary fails and opens the breaker; then no summary is tried
        fake.script(Reply.text("ok"))
        assert post(proxy, between, "open-breaker").status_code == 200
    assert [f["stage"] for f in proxy.logs.events("compaction_failed")] == [
        "summarize", "breaker_open", "breaker_open"]
    samples = scrape(proxy)
    assert value(samples, "proxy_summarizer_breakers", upstream="fake", state="open") == 1
    assert value(samples, "proxy_summarizer_breakers", upstream="fake", state="half_open") == 0
    assert failed(samples, "summarize") == 1
    assert failed(samples, "breaker_open") == 2
    assert value(samples, "proxy_compaction_degraded_total", stage="summarize") == 1
    assert value(samples, "proxy_compaction_degraded_total", stage="breaker_open") == 2
    now[0] += 61  # the cooldown is over: the next summary is the trial
    later = scrape(proxy)
    assert value(later, "proxy_summarizer_breakers", upstream="fake", state="open") == 0
    assert value(later, "proxy_summarizer_breakers", upstream="fake", state="half_open") == 1


def test_a_request_the_open_breaker_refuses_is_counted_but_not_as_degraded(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction=OPENS_AT_ONCE)
    over = over_the_limit()
    assert [post(proxy, over, "refused").status_code for _ in range(2)] == [503, 503]
    samples = scrape(proxy)
    assert failed(samples, "summarize") == 1 and failed(samples, "breaker_open") == 1
    degraded = [key for key in samples if key[0] == "proxy_compaction_degraded_total"]
    assert not degraded, "a refused request was counted as forwarded"


def test_a_failure_requests_share_is_one_failed_compaction_and_each_degraded_request(
        loop_thread, gated: GatedFake, make_proxy) -> None:
    FakeSummarizer.install(gated, fail=100)
    proxy = make_proxy(gated, models=MODELS, compaction=COMPACTION)
    between = between_trigger_and_limit()
    gated.script(Reply.text("ok"), Reply.text("ok"))
    answers = second_waits(loop_thread, gated, proxy, between, between, "shares")
    assert [a.status_code for a in answers] == [200, 200]
    assert [bool(f.get("shared")) for f in proxy.logs.events("compaction_failed")] == [
        False, True]
    samples = scrape(proxy)
    assert failed(samples, "summarize") == 1, "the summarizer failed once"
    assert value(samples, "proxy_compaction_degraded_total", stage="summarize") == 2


def test_a_request_hysteresis_refuses_is_counted(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "trigger_ratio": 0.9, "rearm_ratio": 1.0})
    first = over_the_limit()
    fake.script(Reply.text("compacted"))
    assert post(proxy, first, "hysteresis").status_code == 200
    long_task = "".join(f"requirement {i:04d}: keep this line\n" for i in range(1250))
    later = [*first, {"role": "assistant", "content": "done"},
             {"role": "user", "content": long_task}]  # over the limit, not re-armed
    refused = post(proxy, later, "hysteresis")
    assert refused.status_code == 400 and "hysteresis" in refused.text
    assert failed(scrape(proxy), "hysteresis") == 1


def test_a_failed_overflow_retry_is_counted(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": 9_000})  # the model is smaller than its profile says
    FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    messages, _ = planted_session(200)
    answer = post(proxy, _prefix(messages, 9_300, 11_300), "overflow")
    assert answer.status_code == 400
    samples = scrape(proxy)
    assert failed(samples, "summarize") == 1 and failed(samples, "overflow_retry") == 1


def test_a_failed_offload_is_counted_beside_the_completed_compaction(
        make_fake, make_proxy, tmp_path: Path) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    state = tmp_path / "offload-state"
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP, state_path=str(state))
    # Lost while the proxy runs (one that cannot take files at start stops the start).
    (state / "history").rmdir()
    (state / "history").write_text("not a directory: every history append fails")
    fake.script(Reply.text("ok"))
    assert post(proxy, over_the_limit(), "no-history").status_code == 200
    samples = scrape(proxy)
    assert failed(samples, "offload") == 1
    assert value(samples, "proxy_compactions_total", strategy="partial",
                 outcome="completed") == 1


def test_queued_writes_a_full_disk_loses_are_counted(make_fake, make_proxy,
                                                     loop_thread) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    store = proxy.app[SERVICES].pipeline.store
    assert value(scrape(proxy), "proxy_state_write_failures_total") == 0

    loop_thread.run(store.store._run(fill_the_disk, store))
    for n in range(40):  # new threads, long ids: rows the last page cannot hold
        fake.script(Reply.text("ok"))
        assert post(proxy, [{"role": "user", "content": "hi"}], f"t{n:02d}-" + "x" * 300,
                    model="gpt-4o").status_code == 200
    loop_thread.run(store.flush())
    lost = store.store.writer.failed
    assert lost > 0 and proxy.logs.events("state_write_failed")
    assert value(scrape(proxy), "proxy_state_write_failures_total") == lost


def test_a_checkpoint_the_full_disk_refuses_is_a_failed_write(make_fake, make_proxy,
                                                              loop_thread) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    store = proxy.app[SERVICES].pipeline.store
    loop_thread.run(store.store._run(fill_the_disk, store))
    assert post(proxy, over_the_limit(), "full").status_code == 503  # the summary is lost
    loop_thread.run(store.flush())
    samples = scrape(proxy)
    assert failed(samples, "checkpoint") == 1
    queued = store.store.writer.failed  # the request's own activity and anchor writes
    assert value(samples, "proxy_state_write_failures_total") == 1 + queued


def test_a_damaged_state_answer_is_counted(tmp_path: Path, make_proxy, fake: Any,
                                           loop_thread: Any) -> None:
    loop_thread.run(damaged_state(tmp_path / "state"))
    # retention off: the state's times are from 1970, and a sweep would meet the damage first
    proxy = make_proxy(fake, state_path=str(tmp_path / "state"),
                       state={"check_on_start": False, "retention_days": 0})
    assert value(scrape(proxy), "proxy_state_damaged_total") == 0
    hi = [{"role": "user", "content": "hi"}]
    assert post(proxy, hi, DAMAGED, model="gpt-4o").status_code == 500
    fake.script(Reply.text("ok"))
    assert post(proxy, hi, SOUND, model="gpt-4o").status_code == 200
    assert value(scrape(proxy), "proxy_state_damaged_total") == 1

