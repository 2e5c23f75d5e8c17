"""thread_key_text: the one place a client's thread id becomes storable text."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from proxy.records import ThreadKey
from proxy.store.keys import storable_key, thread_key_text

any_text = st.text(st.characters(codec=None, categories=None), max_size=400)
DIGEST = re.compile(r"~[0-9a-f]{64}")


def test_clean_printable_ids_are_kept_as_is() -> None:
    for raw in ("thread-1", "../../etc/passwd", "会话 42", "a" * 256, "😀"):
        assert thread_key_text(raw) == raw


def test_anything_else_becomes_a_digest() -> None:
    header_bytes = b"id-\xff\xfe".decode("utf-8", "surrogateescape")
    for raw in ("a" * 257, "x" * 10_240, "a\x00b", "", "\n", header_bytes, "\ud800", "~tilde"):
        assert DIGEST.fullmatch(thread_key_text(raw)), raw


def test_digests_tell_ids_apart() -> None:
    raws = ["\ud800", "\udced\udca0\udc80", "a\x00", "a\x00\x00", "a" * 300, "a" * 301]
    assert len({thread_key_text(raw) for raw in raws}) == len(raws)


def test_storable_key_normalizes_both_parts() -> None:
    key = storable_key(ThreadKey("tenant\x00", "thread\x00"))
    assert DIGEST.fullmatch(key.tenant) and DIGEST.fullmatch(key.thread)


@given(any_text)
def test_result_is_always_clean_short_and_idempotent(raw: str) -> None:
    text = thread_key_text(raw)
    assert 0 < len(text) <= 256 and text.isprintable()
    text.encode("utf-8")  # no lone surrogate survives
    assert thread_key_text(text) == text


@given(any_text, any_text)
def test_distinct_ids_stay_distinct(a: str, b: str) -> None:
    if a != b:
        assert thread_key_text(a) != thread_key_text(b)


def test_the_memo_keeps_only_short_ids_and_stays_bounded() -> None:
    from proxy.store import keys

    keys._KEY_TEXTS.clear()
    long_id = "a" * 5_000
    assert thread_key_text(long_id) == thread_key_text(long_id)  # computed, not remembered
    assert long_id not in keys._KEY_TEXTS
    for i in range(keys._MEMO_SIZE + 10):
        thread_key_text(f"thread-{i}")
    assert 0 < len(keys._KEY_TEXTS) <= keys._MEMO_SIZE
    assert storable_key(ThreadKey("t", long_id)) == storable_key(ThreadKey("t", long_id))
    assert ThreadKey("t", long_id) not in keys._STORABLE_KEYS


@given(any_text, st.sampled_from(["anonymous", "0" * 32]))
def test_the_pipeline_keys_a_thread_by_its_storable_text(thread: str, tenant: str) -> None:
    from proxy.server.pipeline import Pipeline
    from proxy.threads import ThreadIdentity

    identity = ThreadIdentity(thread, "header:x-thread-id", tenant)
    expected = ThreadKey(tenant, thread_key_text(thread))
    assert Pipeline.thread_key(identity) == expected
    assert Pipeline.thread_key(identity) == expected
    assert Pipeline.thread_key(ThreadIdentity(None, "none", tenant)) is None
