"""Resolving a request's thread (SPEC §2), and the guess made before the body is parsed."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.settings import ThreadSettings
from proxy.threads import body_thread_hint, resolve_thread, tenant_digest

SETTINGS = ThreadSettings()
HEADERS = {"authorization": "Bearer sk-test-key-1"}


def test_a_header_comes_before_body_fields_and_the_tenant_is_never_the_key() -> None:
    found = resolve_thread({**HEADERS, "x-thread-id": "h-1"}, {"prompt_cache_key": "b-1"}, SETTINGS)
    assert (found.thread, found.source) == ("h-1", "header:x-thread-id")
    assert found.tenant == tenant_digest(HEADERS) and "sk-test" not in found.tenant


def test_body_fields_in_order_then_the_fingerprint() -> None:
    assert resolve_thread(HEADERS, {"metadata": {"thread_id": "m"}}, SETTINGS).thread == "m"
    found = resolve_thread(HEADERS, {}, SETTINGS, [b"system", b"user"])
    assert found.source == "fingerprint" and found.thread.startswith("fp:")


@given(st.text(min_size=1, max_size=40), st.sampled_from(["compact", "spaced"]),
       st.booleans(), st.lists(st.text(max_size=30), max_size=5))
def test_the_hint_agrees_with_the_parsed_body_whenever_it_guesses(
        thread: str, style: str, first: bool, contents: list[str]) -> None:
    messages = [{"role": "user", "content": c} for c in contents]
    doc = ({"prompt_cache_key": thread, "model": "m", "messages": messages} if first
           else {"model": "m", "messages": messages, "prompt_cache_key": thread})
    body = (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) if style == "compact"
            else json.dumps(doc)).encode("utf-8", "surrogatepass")
    hint = body_thread_hint(body, SETTINGS, "t")
    if hint is not None:
        assert hint == resolve_thread({}, json.loads(body), SETTINGS, tenant="t")


@pytest.mark.parametrize("body", [
    b'{"model":"m","prompt_cache_key":"a\\"b"}',  # an escape: not guessed at
    b'{"model":"m","prompt_cache_key":""}',
    b'{"model":"m","prompt_cache_key":7}',
    b'{"model":"m"}',
])
def test_no_hint_where_a_guess_could_differ_from_the_parse(body: bytes) -> None:
    assert body_thread_hint(body, SETTINGS, "t") is None
