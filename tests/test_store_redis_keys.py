"""The Redis key layout: one digest per thread, shared with the history files; no client
text in any key name."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from proxy.records import ThreadKey
from proxy.store.history import HistoryFiles
from proxy.store.redis_keys import RedisKeys, thread_digest

any_text = st.text(st.characters(codec=None, categories=None), max_size=300)


@given(any_text, any_text)
def test_thread_digest_names_the_history_file_too(tenant: str, thread: str) -> None:
    key = ThreadKey(tenant, thread)
    assert HistoryFiles(Path("/h")).path_for(key).name == f"{thread_digest(key)}.jsonl"


@given(any_text, any_text)
def test_key_names_hold_no_client_text(tenant: str, thread: str) -> None:
    keys = RedisKeys("cp:")
    digest = thread_digest(ThreadKey(tenant, thread))
    names = [keys.thread(digest), keys.anchors(digest), keys.events(digest), keys.lease(digest),
             keys.history(digest), keys.tenants_of(thread), keys.origin(thread)]
    for name in names:
        assert name.startswith("cp:") and len(name) == len("cp:x:") + 64
        assert name[5:].isalnum() and name.isascii()


def test_the_digest_is_stable() -> None:
    # Another helper's history keys and any running instance depend on it: never change it.
    assert thread_digest(ThreadKey("tenant-a", "thread-1")) == (
        "26b901369db6c38daa2c28d68b946615993b46c041e7064bb7b85474dcce1fe7")
