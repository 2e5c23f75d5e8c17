"""A compaction whose instance stalls past its lease while the summarizer works, at two real
proxy processes on one Redis: the other instance takes the thread over and checkpoints; the
stalled one, once it runs again, learns the lease is lost, stops (its summarizer call cancelled,
no further call), takes its turn again and sends its request up on the other's checkpoint.
Nothing of the stopped compaction is written. A request takes its turn again once: a second
loss degrades it. A holder that keeps its lease is unchanged."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from aiohttp import web

from proxy.records import ThreadKey
from proxy.store.redis_keys import RedisKeys, thread_digest
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, summary_of
from tests.harness import LoopThread
from tests.process import ProxyProcess, write_config
from tests.test_compaction_detached import COMPACTION
from tests.test_compaction_failure_paths import (between_trigger_and_limit, over_the_limit, post,
                                                 wait_for)
from tests.test_compaction_failures import MODELS, _main_requests
from tests.test_redis_checkpoint_outcome import assert_lines_accounted_for, checkpoints_and_lines
from tests.test_redis_instances import TENANT

LEASE_S = 2.0
# A summarizer with a small window: each compaction takes several calls, so a compaction that
# went on after its lease was lost would make more of them.
SUMMARIZER = "tiny-summarizer"
PROFILES = {**MODELS, "tiny-*": {"max_input_tokens": 5000}}


class FirstHeld(FakeUpstream):
    """The fake upstream, holding its first summarizer request until the gate opens or the
    proxy drops it (counted in `dropped`); later ones are answered at once."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.gate = asyncio.Event()
        self.held = False
        self.dropped = 0

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        async def held(request: web.Request) -> web.StreamResponse:
            if is_summarizer_request(self.recorded(request).json) and not self.held:
                self.held = True
                while not self.gate.is_set():
                    if request.transport is None or request.transport.is_closing():
                        self.dropped += 1
                        return web.Response(status=499)
                    await asyncio.sleep(0.02)
            return await handler(request)

        return await super()._middleware(request, held)

    @property
    def summarizer_requests(self) -> int:
        return sum(is_summarizer_request(r.json) for r in self.requests)


@pytest.fixture
def fake(loop_thread: LoopThread) -> Iterator[FirstHeld]:
    upstream = FirstHeld(limits={"small-*": LIMIT})
    FakeSummarizer.install(upstream)
    loop_thread.run(upstream.start())
    yield upstream
    loop_thread.loop.call_soon_threadsafe(upstream.gate.set)
    loop_thread.run(upstream.stop())


@pytest.fixture
def two(tmp_path: Path, fake: FirstHeld, redis_url: str,
        redis_prefix: str) -> Iterator[tuple[ProxyProcess, ProxyProcess]]:
    started = []
    for n in range(2):
        config = write_config(
            tmp_path / f"instance{n}.yaml", fake.url, tmp_path / f"state{n}",
            state={"backend": "redis",
                   "redis": {"url": redis_url, "prefix": redis_prefix, "lease_s": LEASE_S}},
            models=PROFILES,
            compaction={**COMPACTION, "summarizer": {**COMPACTION["summarizer"],
                                                     "model": SUMMARIZER}})
        started.append(ProxyProcess(config))
    yield started[0], started[1]
    for process in started:
        process.process.send_signal(signal.SIGCONT)  # a test that failed may leave one stopped
        process.kill()


def test_a_compaction_that_lost_its_lease_stops_and_its_request_uses_the_new_checkpoint(
        two: tuple[ProxyProcess, ProxyProcess], fake: FirstHeld, redis_url: str,
        redis_prefix: str, loop_thread: LoopThread) -> None:
    a, b = two
    over = over_the_limit()
    with ThreadPoolExecutor(2) as pool:
        at_a = pool.submit(post, a, over, "stalled")
        wait_for(lambda: fake.summarizer_requests >= 1, timeout=20)
        a.signal(signal.SIGSTOP)  # a stall: its lease runs out, its summary unanswered
        try:
            answer_b = pool.submit(post, b, over, "stalled").result(60)
        finally:
            a.signal(signal.SIGCONT)
        assert answer_b.status_code == 200, answer_b.text
        assert answer_b.headers["x-compaction"] == "compacted"
        [completed] = b.wait_for("compaction_completed")
        calls_by_b = fake.summarizer_requests - 1
        assert calls_by_b >= 2, "each compaction must take several summarizer calls"
        # Its renewal finds the lease lost: the summarizer call is dropped, the gate still shut.
        # Not ended by `at_a` finishing: a request that dropped the call may answer before the
        # fake's next look at the closed connection (a loaded machine), which counts it.
        deadline = time.monotonic() + 3 * LEASE_S
        while not fake.dropped and time.monotonic() < deadline:
            time.sleep(0.02)
        loop_thread.loop.call_soon_threadsafe(fake.gate.set)  # the old code's call ends
        answer_a = at_a.result(60)
    assert fake.dropped == 1
    assert answer_a.status_code == 200, answer_a.text
    assert answer_a.headers["x-compaction"] == "applied"
    time.sleep(0.5)  # a call made after the answer would show up here
    assert fake.summarizer_requests == 1 + calls_by_b  # a made none after its first
    # Its request went up on b's checkpoint: b's summary, as b's own request had it.
    [at_b_body, at_a_body] = [r.body for r in _main_requests(fake)[-2:]]
    summary = summary_of(at_b_body)
    assert summary is not None and summary_of(at_a_body) == summary
    [line_a] = a.wait_for("request")
    assert line_a["compaction_reused"] == completed["seq"] == 1
    assert line_a["compaction_lease_lost"] == 1
    assert not line_a.get("compaction_failed") and not line_a.get("compaction_degraded")
    assert a.wait_for("compaction_lease_lost")
    [failed] = a.wait_for("compaction_failed")
    assert (failed["stage"], failed["degraded"], failed["retrying"]) == ("lease_lost", False,
                                                                         True)
    assert not a.events("compaction_completed")
    # Nothing half-written: b's checkpoint alone, its history lines each once.
    [event] = assert_lines_accounted_for(redis_url, redis_prefix, "stalled")
    assert event["seq"] == 1
    _, lines = checkpoints_and_lines(redis_url, redis_prefix, "stalled")
    ids = [line["record"]["id"] for line in lines]
    assert len(ids) == len(set(ids))


def test_a_holder_that_keeps_its_lease_past_lease_s_compacts_as_before(
        two: tuple[ProxyProcess, ProxyProcess], fake: FirstHeld, redis_url: str,
        redis_prefix: str, loop_thread: LoopThread) -> None:
    a, b = two
    over = over_the_limit()
    with ThreadPoolExecutor(2) as pool:
        at_a = pool.submit(post, a, over, "kept")
        wait_for(lambda: fake.summarizer_requests >= 1, timeout=20)
        at_b = pool.submit(post, b, over, "kept")  # waits on a's lease, renewed meanwhile
        time.sleep(LEASE_S * 2)
        assert fake.summarizer_requests == 1
        loop_thread.loop.call_soon_threadsafe(fake.gate.set)
        answers = [at_a.result(60), at_b.result(60)]
    assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
    assert [r.headers["x-compaction"] for r in answers] == ["compacted", "applied"]
    assert fake.dropped == 0
    [line_a] = a.wait_for("request")
    [line_b] = b.wait_for("request")
    assert line_a["compacted"] is True and "compaction_lease_lost" not in line_a
    assert line_b["compaction_reused"] == 1 and "compaction_lease_lost" not in line_b
    assert not a.events("compaction_lease_lost") and not a.events("compaction_failed")
    assert not b.events("compaction_started")
    [event] = assert_lines_accounted_for(redis_url, redis_prefix, "kept")
    assert event["seq"] == 1


class TakenOver(FakeUpstream):
    """The fake upstream, at whose every summarizer request another instance takes the thread's
    lease over for a moment (as after a stall) while the request is held: unanswered until
    the proxy drops it (counted in `dropped`)."""

    def __init__(self, lease: str, redis_url: str, **options: Any) -> None:
        super().__init__(**options)
        self.lease = lease
        self.redis_url = redis_url
        self.dropped = 0

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        async def taken(request: web.Request) -> web.StreamResponse:
            if not is_summarizer_request(self.recorded(request).json):
                return await handler(request)
            with redis.Redis.from_url(self.redis_url) as client:
                client.set(self.lease, b"another-instance", px=int(LEASE_S * 500))
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.02)
            self.dropped += 1
            return web.Response(status=499)

        return await super()._middleware(request, taken)


def test_a_request_whose_lease_is_lost_twice_degrades_after_one_retry(
        make_proxy: Any, loop_thread: LoopThread, redis_url: str, redis_prefix: str) -> None:
    lease = RedisKeys(redis_prefix).lease(thread_digest(ThreadKey(TENANT, "twice")))
    fake = TakenOver(lease, redis_url, limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    loop_thread.run(fake.start())
    try:
        proxy = make_proxy(fake, models=MODELS, compaction=COMPACTION, state={
            "backend": "redis",
            "redis": {"url": redis_url, "prefix": redis_prefix, "lease_s": LEASE_S}})
        answer = post(proxy, between_trigger_and_limit(), "twice")
    finally:
        loop_thread.run(fake.stop())
    # Forwarded with the cheap stages only, as after any failed compaction that still fits.
    assert answer.status_code == 200, answer.text
    assert fake.dropped == 2 and summary_of(_main_requests(fake)[-1].body) is None
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], f["degraded"], f.get("retrying")) for f in failed] == [
        ("lease_lost", False, True), ("lease_lost", True, None)]
    assert len(proxy.logs.events("compaction_lease_lost")) == 2
    [line] = proxy.requests()
    assert (line["compaction_lease_lost"], line["compaction_failed"],
            line["compaction_degraded"]) == (2, "lease_lost", "lease_lost")
    state = asyncio.run(_events(redis_url, redis_prefix, "twice"))
    assert state == ([], [])  # nothing written


async def _events(url: str, prefix: str, thread: str) -> tuple[list[Any], list[Any]]:
    keys = RedisKeys(prefix)
    digest = thread_digest(ThreadKey(TENANT, thread))
    async with redis.asyncio.Redis.from_url(url) as client:
        return (await client.lrange(keys.events(digest), 0, -1),
                await client.lrange(keys.history(digest), 0, -1))
