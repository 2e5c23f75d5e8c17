"""Many threads compacting at once: nothing of one thread (or one tenant) reaches another.

Fifty conversations, twenty-five thread ids each used by two tenants (SPEC §2), five turns each
past the trigger, all in flight together: every one compacts, and each summary, history file
and checkpoint holds its own conversation's facts only.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from proxy.threads import tenant_digest
from tests.compaction_session import LIMIT, MODEL, planted_session, summary_of
from tests.test_compaction_failures import MODELS, NO_CHEAP

IDS = 25
TENANTS = ("sk-tenant-a-1234567", "sk-tenant-b-7654321")
TURNS = 5
TAG = re.compile(r"conv-\d+-\d+")


def _conversation(thread: int, tenant: int) -> tuple[list[dict[str, Any]], list[int]]:
    """A session tagged with its own facts, and the turns to send: the first past the trigger
    and the next four."""
    messages, _ = planted_session(120, seed=thread * 2 + tenant, tag=f"conv-{thread}-{tenant}")
    answers = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    low, high = 0, len(answers)  # the first answer whose prefix is over the trigger
    while low < high:
        middle = (low + high) // 2
        if chat_prompt_tokens({"messages": messages[:answers[middle]]}) > LIMIT * 0.8:
            high = middle
        else:
            low = middle + 1
    assert len(answers) - low >= TURNS
    return messages, answers[low:low + TURNS]


def _converse(base_url: str, thread: int, tenant: int) -> list[int]:
    messages, turns = _conversation(thread, tenant)
    statuses = []
    with httpx.Client(timeout=120) as client:
        for k in turns:
            answer = client.post(
                f"{base_url}/chat/completions",
                content=orjson.dumps({"model": MODEL, "messages": messages[:k]}),
                headers={"content-type": "application/json", "x-thread-id": f"same-{thread}",
                         "authorization": f"Bearer {TENANTS[tenant]}"})
            statuses.append(answer.status_code)
    return statuses


def test_fifty_threads_compacting_at_once_keep_to_themselves(loop_thread, make_fake,
                                                              make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    # each one compacts; the fifty summaries and requests in flight on a loaded machine may wait
    # longer than the harness's 2 s for a connection of the pool (aiohttp counts that wait)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP,
                       upstreams={"fake": {"connect_timeout_s": 15}})
    pairs = [(thread, tenant) for thread in range(IDS) for tenant in range(len(TENANTS))]
    with ThreadPoolExecutor(len(pairs)) as pool:
        statuses = list(pool.map(lambda pair: _converse(proxy.base_url, *pair), pairs))
    assert statuses == [[200] * TURNS] * len(pairs)

    completed = proxy.logs.events("compaction_completed")
    assert not proxy.logs.events("compaction_failed")
    by_conversation = {(e["thread"], e["tenant"]) for e in completed}
    assert len(by_conversation) == len(pairs), "a conversation did not compact"

    for request in fake.requests:
        tags = set(TAG.findall(request.body.decode()))
        assert len(tags) <= 1, f"one upstream request mixed conversations: {sorted(tags)}"
    lines = {(r["thread"], r["tenant"]) for r in proxy.requests()}
    tenant_of = _tenants(proxy)
    store = proxy.app[SERVICES].pipeline.store
    for thread, tenant in pairs:
        own = f"conv-{thread}-{tenant}"
        digest = tenant_of[TENANTS[tenant]]
        assert (f"same-{thread}", digest) in lines
        events = loop_thread.run(store.events(ThreadKey(digest, f"same-{thread}")))
        assert events and {tag for e in events
                           for tag in TAG.findall(str(e.summary_message))} == {own}
        history = Path(events[-1].history_file)
        assert history.stat().st_size == events[-1].history_end
        assert set(TAG.findall(history.read_text())) == {own}
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert all(summary_of(r.body) is None or TAG.search(summary_of(r.body)) for r in main)


def _tenants(proxy) -> dict[str, str]:
    """Each credential's tenant digest, as the proxy computes it."""
    return {key: tenant_digest({"authorization": f"Bearer {key}"}) for key in TENANTS}
