"""A checkpoint whose write to Redis ended without a clear outcome keeps its history lines.

Through real proxy processes on a real Redis, seen through a relay (`tests/redis_relay.py`)
that stalls them at the checkpoint's write: an answer lost to the timeout (the server ran the
write), or a proxy cut off from Redis past its lease while another instance takes the thread
over. Either way every checkpoint committed must find its lines in the thread's history list:
`history_end` lines, each once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from proxy.records import ThreadKey
from proxy.store.redis_keys import RedisKeys, thread_digest
from proxy.store.redis_eval import sha
from proxy.store.redis_scripts import ADD_EVENT
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.process import ProxyProcess, cli, write_config
from tests.redis_relay import RedisRelay
from tests.redis_server import RedisServer
from tests.test_compaction_detached import COMPACTION, GatedFake, gated, open_gate  # noqa: F401
from tests.test_compaction_failure_paths import over_the_limit, post, wait_for
from tests.test_compaction_failures import MODELS
from tests.test_redis_instances import TENANT

CHECKPOINT = sha(ADD_EVENT).encode()


@pytest.fixture
def relay(redis_server: RedisServer) -> Iterator[RedisRelay]:
    relay = RedisRelay(redis_server.port)
    yield relay
    relay.close()


@pytest.fixture
def start(tmp_path: Path, gated: GatedFake, redis_prefix: str) -> Iterator[Any]:
    started: list[ProxyProcess] = []

    def start(url: str, **redis_options: Any) -> ProxyProcess:
        n = len(started)
        config = write_config(
            tmp_path / f"instance{n}.yaml", gated.url, tmp_path / f"state{n}",
            state={"backend": "redis",
                   "redis": {"url": url, "prefix": redis_prefix, **redis_options}},
            models=MODELS, compaction=COMPACTION)
        started.append(ProxyProcess(config))
        return started[-1]

    yield start
    for process in started:
        process.kill()


def checkpoints_and_lines(url: str, prefix: str, thread: str) -> tuple[list[dict[str, Any]],
                                                                       list[dict[str, Any]]]:
    keys = RedisKeys(prefix)
    digest = thread_digest(ThreadKey(TENANT, thread))
    with redis.Redis.from_url(url) as client:
        events = [orjson.loads(e) for e in client.lrange(keys.events(digest), 0, -1)]
        lines = [orjson.loads(e) for e in client.lrange(keys.history(digest), 0, -1)]
    return events, lines


def assert_lines_accounted_for(url: str, prefix: str, thread: str) -> list[dict[str, Any]]:
    events, lines = checkpoints_and_lines(url, prefix, thread)
    assert events, "no checkpoint was committed"
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    for event in events:
        assert event["history_end"] <= len(lines), (event["seq"], event["history_end"],
                                                    len(lines))
    assert events[-1]["history_end"] == len(lines)
    return events


def test_a_checkpoint_whose_answer_timed_out_keeps_its_history_lines(
        start: Any, gated: GatedFake, relay: RedisRelay, redis_server: RedisServer,
        redis_prefix: str, loop_thread: Any) -> None:
    FakeSummarizer.install(gated)
    proxy = start(relay.url, timeout_s=1)
    open_gate(loop_thread, gated)
    gated.script(Reply.text("summary one"), Reply.text("answer"))
    written = relay.hold_reply(CHECKPOINT, 2.5)  # the server runs it; its answer comes late
    answer = post(proxy, over_the_limit(), "late-answer")
    assert written.is_set()
    assert answer.status_code in (200, 503), answer.text
    time.sleep(2.0)  # the held answer goes by
    [event] = assert_lines_accounted_for(redis_server.url, redis_prefix, "late-answer")
    assert event["history_end"] > 0
    retried = post(proxy, over_the_limit(), "late-answer")  # the checkpoint serves the retry
    assert retried.status_code == 200, retried.text
    assert retried.headers["x-compaction"] == "applied"


def test_an_instance_cut_off_past_its_lease_leaves_the_new_holders_lines(
        start: Any, gated: GatedFake, relay: RedisRelay, redis_server: RedisServer,
        redis_prefix: str, loop_thread: Any) -> None:
    FakeSummarizer.install(gated)
    second_relay = RedisRelay(redis_server.port)
    try:
        a = start(relay.url, lease_s=2, timeout_s=10)
        b = start(second_relay.url, lease_s=2, timeout_s=10)
        over = over_the_limit()
        gated.script(Reply.text("summary at a"), Reply.text("summary at b"),
                     Reply.text("answer at b"))
        cut_off = relay.stall(CHECKPOINT, 30)  # a's checkpoint and renewals go nowhere
        b_writes = second_relay.hold_reply(CHECKPOINT, 1.5)
        with ThreadPoolExecutor(2) as pool:
            at_a = pool.submit(post, a, over, "handover")
            wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
            at_b = pool.submit(post, b, over, "handover")  # waits on a's lease
            open_gate(loop_thread, gated)
            assert cut_off.wait(20)
            # a's lease runs out; b takes it, cuts a's lines off, offloads its own and writes
            # its checkpoint, whose answer is late: b holds the lease when a's refused one
            # arrives.
            assert b_writes.wait(20)
            relay.release()
            answers = [at_a.result(60), at_b.result(60)]
        assert answers[1].status_code == 200, answers[1].text
        assert answers[1].headers["x-compaction"] == "compacted"
        deadline = time.monotonic() + 10
        while not a.events("request") and time.monotonic() < deadline:
            time.sleep(0.05)
        [event] = assert_lines_accounted_for(redis_server.url, redis_prefix, "handover")
        assert event["history_end"] > 0
    finally:
        second_relay.close()


def test_a_checkpoint_arriving_after_the_new_holder_finished_is_refused(
        start: Any, gated: GatedFake, relay: RedisRelay, redis_server: RedisServer,
        redis_prefix: str, loop_thread: Any) -> None:
    """The lease ran out under a cut-off instance and the one that took it over has written its
    checkpoint and let the lease go: the late checkpoint, built on the state before, must not
    land on top of the new one. Its request takes its turn again and goes up on that one."""
    FakeSummarizer.install(gated)
    a = start(relay.url, lease_s=2, timeout_s=10)
    b = start(redis_server.url, lease_s=2, timeout_s=10)
    over = over_the_limit()
    cut_off = relay.stall(CHECKPOINT, 30)
    with ThreadPoolExecutor(2) as pool:
        at_a = pool.submit(post, a, over, "late")
        wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
        at_b = pool.submit(post, b, over, "late")  # waits on a's lease, then takes it over
        open_gate(loop_thread, gated)
        assert cut_off.wait(20)
        answer_b = at_b.result(60)
        assert answer_b.status_code == 200, answer_b.text
        assert answer_b.headers["x-compaction"] == "compacted"
        relay.release()
        answer_a = at_a.result(60)
    assert answer_a.status_code == 200, answer_a.text
    assert answer_a.headers["x-compaction"] == "applied"
    [failed] = a.wait_for("compaction_failed")
    assert (failed["stage"], failed["degraded"]) == ("lease_lost", False)
    assert "as its checkpoint was written" in failed["error"]
    [completed] = b.wait_for("compaction_completed")
    [event] = assert_lines_accounted_for(redis_server.url, redis_prefix, "late")
    assert event["seq"] == completed["seq"] == 1
    [line_a] = a.wait_for("request")
    assert line_a["compaction_reused"] == 1 and line_a["compaction_lease_lost"] == 1


def test_a_manual_compact_and_an_automatic_one_at_two_instances_take_turns(
        start: Any, gated: GatedFake, redis_server: RedisServer, redis_prefix: str,
        loop_thread: Any) -> None:
    FakeSummarizer.install(gated)
    a = start(redis_server.url)
    b = start(redis_server.url)
    over = over_the_limit()
    with ThreadPoolExecutor(2) as pool:
        manual = pool.submit(post, a, [*over, {"role": "user", "content": "/compact"}], "both")
        wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
        automatic = pool.submit(post, b, over, "both")  # waits on a's lease
        time.sleep(0.5)
        assert not b.events("compaction_started")
        open_gate(loop_thread, gated)
        answers = [manual.result(60), automatic.result(60)]
    assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
    assert answers[0].headers["x-compaction"] == "compacted"
    events = assert_lines_accounted_for(redis_server.url, redis_prefix, "both")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    _, lines = checkpoints_and_lines(redis_server.url, redis_prefix, "both")
    ids = [line["record"]["id"] for line in lines]
    assert len(ids) == len(set(ids))  # each message offloaded once
    [line_b] = b.wait_for("request")
    if answers[1].headers["x-compaction"] == "applied":
        assert line_b["compaction_reused"] == 1 and len(events) == 1
    else:  # compacted again, on top of a's checkpoint
        assert len(events) == 2 and events[1]["history_end"] > events[0]["history_end"]


def test_an_instance_killed_between_offload_and_checkpoint_leaves_a_sound_thread(
        start: Any, gated: GatedFake, relay: RedisRelay, redis_server: RedisServer,
        redis_prefix: str, loop_thread: Any, tmp_path: Path) -> None:
    FakeSummarizer.install(gated)
    a = start(relay.url, lease_s=2)
    b = start(redis_server.url, lease_s=2)
    open_gate(loop_thread, gated)
    over = over_the_limit()
    offloaded = relay.stall(CHECKPOINT, 30)
    with ThreadPoolExecutor(1) as pool:
        lost = pool.submit(post, a, over, "killed", timeout=30)
        assert offloaded.wait(20)  # its lines are in the list; its checkpoint never arrives
        a.kill()
        lost.exception(30)
    relay.close()
    answer = post(b, over, "killed")  # once a's lease has run out
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted"
    [discarded] = b.wait_for("history_tail_discarded")
    assert discarded["kept_lines"] == 0 and discarded["lines"] > 0
    [event] = assert_lines_accounted_for(redis_server.url, redis_prefix, "killed")
    _, lines = checkpoints_and_lines(redis_server.url, redis_prefix, "killed")
    assert event["history_end"] == discarded["lines"]  # a's copy gone, b's once
    ids = [line["record"]["id"] for line in lines]
    assert len(ids) == len(set(ids))
    checked = cli("check-state", "--config", str(tmp_path / "instance1.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_compaction_whose_lease_renewal_is_in_flight_at_its_end_answers(
        start: Any, gated: GatedFake, relay: RedisRelay, redis_server: RedisServer,
        redis_prefix: str, loop_thread: Any) -> None:
    """b's Redis stalls while it writes its checkpoint, its lease's renewals with it: the
    cancelled renewal must end, not hold the request for ever (it hung, waiting for it)."""
    FakeSummarizer.install(gated)
    second_relay = RedisRelay(redis_server.port)
    try:
        a = start(relay.url, lease_s=2, timeout_s=10)
        b = start(second_relay.url, lease_s=2, timeout_s=10)
        over = over_the_limit()
        cut_off = relay.stall(CHECKPOINT, 30)
        b_stalled = second_relay.stall(CHECKPOINT, 1.5)
        with ThreadPoolExecutor(2) as pool:
            at_a = pool.submit(post, a, over, "renewing", timeout=40)
            wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
            at_b = pool.submit(post, b, over, "renewing", timeout=20)
            open_gate(loop_thread, gated)
            assert cut_off.wait(20) and b_stalled.wait(20)
            relay.release()
            answer = at_b.result(30)
            at_a.result(30)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-compaction"] == "compacted"
    finally:
        second_relay.close()
