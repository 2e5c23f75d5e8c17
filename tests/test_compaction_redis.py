"""A session compacted by the real proxy with `state.backend: redis`: each checkpoint's
`history_file` and `history_end` point at the Redis list that holds exactly the messages the
checkpoints summarized, and nothing lands under `state.path`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proxy.core.sanitize import Policy, sanitize
from proxy.records import CompactionEvent, ThreadKey
from proxy.settings import RedisSettings, StateSettings
from proxy.store import create_store
from proxy.store.redis_history import RedisHistory
from proxy.store.redis_keys import thread_digest
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session, replay
from tests.factories import entries_of


async def _stored(state: StateSettings) -> tuple[ThreadKey, list[CompactionEvent], list[dict]]:
    """The one thread's key, its checkpoints and its history lines, as a new process reads them."""
    store = create_store(state)
    await store.open()
    history = RedisHistory(state.redis)
    await history.open()
    try:
        [summary] = await store.list_threads()
        key = ThreadKey(summary.tenant, summary.thread)
        events = await store.events(key)
        contents = await history.read_async(events[-1].history_file)
        assert not contents.torn
        return key, events, contents.records
    finally:
        await history.close()
        await store.close()


def test_checkpoints_point_at_the_redis_list_of_what_they_summarized(
        make_fake, make_proxy, redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    redis = {"url": redis_url, "prefix": redis_prefix}
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}},
                       state={"backend": "redis", "redis": redis},
                       state_path=str(tmp_path / "unused"))
    messages, _ = planted_session(160)
    run = replay(proxy.base_url, fake, messages, "redis-session")
    assert set(run.statuses) == {200}
    completed = proxy.logs.events("compaction_completed")
    assert len(completed) >= 2, "the session must compact more than once"

    state = StateSettings(backend="redis", redis=RedisSettings(url=redis_url, prefix=redis_prefix))
    key, events, lines = asyncio.run(_stored(state))
    assert key.thread == "redis-session" and len(events) == len(completed)
    assert {e.history_file for e in events} == {f"redis:{redis_prefix}h:{thread_digest(key)}"}
    # Positions count lines: each checkpoint's end is the list's length once its lines were in.
    assert events[-1].history_end == len(lines)
    assert [e.history_end for e in events] == sorted({e.history_end for e in events})
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    # Exactly the summarized messages: from the first after the instructions to the last cut.
    indexes = [line["record"]["index"] for line in lines]
    assert indexes == list(range(indexes[0], events[-1].cutoff_index))
    clean = sanitize(entries_of("chat", messages[:events[-1].cutoff_index]), Policy.PRIVATE_FREE,
                     upstream=False)
    by_index = dict(zip(clean.kept, clean.entries))
    assert [line["record"]["message"] for line in lines] == [by_index[i].raw for i in indexes]
    for event in events:
        ends_at = [line for line in lines if line["record"]["index"] < event.cutoff_index]
        assert event.history_end == len(ends_at)
    assert not (tmp_path / "unused").exists(), "nothing is written under state.path"

