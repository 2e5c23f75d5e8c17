"""Several proxy instances on one Redis (`state.backend: redis`): a thread's turns may reach any.

Each instance is a real `compaction-proxy serve` process, as behind a load balancer; they share
nothing but the Redis server (each has a state directory of its own, which they must not need).
What one instance learned (an answer's anchor, a checkpoint) serves the thread's next turn at
another, and a thread is compacted by one instance at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from proxy.records import ThreadKey, ThreadState
from proxy.settings import RedisSettings, StateSettings
from proxy.store import create_store
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from proxy.threads import tenant_digest
from tests.compaction_session import summary_of
from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.process import ProxyProcess, write_config
from tests.test_compaction_detached import COMPACTION, GatedFake, gated, open_gate  # noqa: F401
from tests.test_compaction_failure_paths import over_the_limit, post, wait_for
from tests.test_compaction_failures import MODELS, _main_requests

TENANT = tenant_digest({"authorization": f"Bearer {API_KEY}"})


@pytest.fixture
def instances(tmp_path: Path, gated: GatedFake, redis_url: str,
              redis_prefix: str) -> Iterator[Any]:
    started: list[ProxyProcess] = []

    def start(count: int = 2, lease_s: float = 30,
              prelude: str | None = None) -> list[ProxyProcess]:
        for _ in range(count):
            n = len(started)
            config = write_config(
                tmp_path / f"instance{n}.yaml", gated.url, tmp_path / f"state{n}",
                state={"backend": "redis",
                       "redis": {"url": redis_url, "prefix": redis_prefix, "lease_s": lease_s}},
                models=MODELS, compaction=COMPACTION, tokens=COUNTED)
            started.append(ProxyProcess(config, prelude=prelude))
        return started[-count:]

    yield start
    for process in started:
        process.kill()


def thread_state(redis_url: str, prefix: str, thread: str) -> ThreadState:
    """The thread's state as any instance reads it from Redis."""
    async def load() -> ThreadState:
        store = create_store(StateSettings(backend="redis",
                                           redis=RedisSettings(url=redis_url, prefix=prefix)))
        await store.open()
        try:
            return await store.load(ThreadKey(TENANT, thread))
        finally:
            await store.close()
    return asyncio.run(load())


def anchors_in_redis(redis_url: str, prefix: str, thread: str) -> int:
    """How many anchors of `thread` Redis holds: an answer's is there before its end reaches
    the client (`proxy/server/shared_waits.py`)."""
    return len(thread_state(redis_url, prefix, thread).anchors)


def test_each_turn_is_estimated_from_the_answer_another_instance_relayed(
        instances: Any, gated: GatedFake, redis_url: str, redis_prefix: str) -> None:
    a, b = instances()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan the refactor."}]
    for turn in range(6):
        proxy = (a, b)[turn % 2]
        answer = post(proxy, messages, "alternating")
        assert answer.status_code == 200, answer.text
        [*_, line] = proxy.wait_for("request", count=turn // 2 + 1)
        assert bool(line.get("anchor_used")) is (turn > 0), (turn, line)
        assert anchors_in_redis(redis_url, redis_prefix, "alternating") == turn + 1
        reply = answer.json()["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"Go on with step {turn + 1}."}]


def test_a_checkpoint_written_by_one_instance_is_applied_by_another(
        instances: Any, gated: GatedFake, redis_url: str, redis_prefix: str,
        loop_thread: Any) -> None:
    FakeSummarizer.install(gated)
    a, b = instances()
    open_gate(loop_thread, gated)
    first = over_the_limit()
    gated.script(Reply.text("compacted at a"), Reply.text("applied at b"))
    compacted = post(a, first, "handover")
    assert compacted.status_code == 200, compacted.text
    assert compacted.headers["x-compaction"] == "compacted"
    following = [*first, {"role": "assistant", "content": "compacted at a"},
                 {"role": "user", "content": "and now?"}]
    applied = post(b, following, "handover")
    assert applied.status_code == 200, applied.text
    assert applied.headers["x-compaction"] == "applied"
    [at_a, at_b] = [r.body for r in _main_requests(gated)[-2:]]
    summary = summary_of(at_a)
    assert summary is not None and summary_of(at_b) == summary
    [line_b] = b.wait_for("request")
    [completed] = a.wait_for("compaction_completed")
    assert line_b["checkpoint"] == completed["seq"] == 1
    assert not b.events("compaction_started")
    state = thread_state(redis_url, redis_prefix, "handover")
    assert state.event is not None and state.event_count == 1


def test_one_instance_at_a_time_compacts_a_thread(
        instances: Any, gated: GatedFake, loop_thread: Any) -> None:
    FakeSummarizer.install(gated)
    a, b = instances()
    over = over_the_limit()
    gated.script(Reply.text("first"), Reply.text("second"))
    with ThreadPoolExecutor(2) as pool:
        at_a = pool.submit(post, a, over, "race")
        wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
        at_b = pool.submit(post, b, over, "race")
        # b waits for a's lease; its own summary would be a second request at the gate.
        time.sleep(1.0)
        assert gated.summarizer_requests == 1
        open_gate(loop_thread, gated)
        answers = [at_a.result(), at_b.result()]
    assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
    assert [r.headers["x-compaction"] for r in answers] == ["compacted", "applied"]
    assert len(a.events("compaction_started")) == 1 and not b.events("compaction_started")
    [line_b] = b.wait_for("request")
    assert line_b["compaction_reused"] == 1


def test_an_instance_killed_while_compacting_frees_the_thread_after_its_lease(
        instances: Any, gated: GatedFake, loop_thread: Any) -> None:
    FakeSummarizer.install(gated)
    a, b = instances(lease_s=2)
    over = over_the_limit()
    with ThreadPoolExecutor(1) as pool:
        lost = pool.submit(post, a, over, "orphaned", timeout=30)
        wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
        a.kill()  # holding the thread's lease, its summary unanswered
        lost.exception(30)
    gated.script(Reply.text("after the kill"))
    open_gate(loop_thread, gated)
    started = time.monotonic()
    answer = post(b, over, "orphaned")
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted"
    assert time.monotonic() - started < 15  # the lease ran out; nothing waits for ever
    # Waited for: the answer can come before the reader thread has collected the line.
    assert len(b.wait_for("compaction_completed")) == 1
