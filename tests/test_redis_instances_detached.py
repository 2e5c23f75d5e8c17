"""A client's retry reaching another instance while the compaction its first try started runs
on, detached, at the first (`compact_past_client`): the retry waits on the thread's lease and
reuses that checkpoint instead of paying for a second summary.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.test_compaction_detached import GatedFake, gated, open_gate  # noqa: F401
from tests.test_compaction_failure_paths import over_the_limit, post, wait_for
from tests.test_redis_instances import instances  # noqa: F401


def test_a_retry_at_another_instance_reuses_the_detached_compaction(
        instances: Any, gated: GatedFake, loop_thread: Any) -> None:  # noqa: F811
    FakeSummarizer.install(gated)
    a, b = instances()
    over = over_the_limit()
    gated.script(Reply.text("answer at b"))
    with pytest.raises(httpx.ReadTimeout):
        post(a, over, "retried", timeout=1.5)  # the client gives up while a summarizes
    wait_for(lambda: gated.summarizer_requests >= 1, timeout=20)
    a.wait_for("compaction_detached")
    started = time.monotonic()
    open_later = loop_thread.loop.call_later  # the gate opens while b waits on a's lease
    loop_thread.loop.call_soon_threadsafe(open_later, 1.0, gated.gate.set)
    retried = post(b, over, "retried")
    assert retried.status_code == 200, retried.text
    assert retried.headers["x-compaction"] == "applied"
    assert time.monotonic() - started >= 0.9  # it waited for a's compaction
    assert not b.events("compaction_started")  # no second summary
    [line] = b.wait_for("request")
    assert line["compaction_reused"] == 1
    [completed] = a.wait_for("compaction_completed")
    assert completed["seq"] == 1 and completed.get("detached") is True
