"""A request line quotes the client's `model` as sent, but a client can send any string there:
a megabyte of it must not make a megabyte log line (log shippers split or drop long lines, and
every request writes one). The line keeps the start and says how long the model was."""

from __future__ import annotations

import httpx
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, planted_session
from tests.test_compaction_failures import MODELS, NO_CHEAP, _prefix

MAX_LINE = 4096


@pytest.mark.parametrize("path", ["chat/completions", "embeddings"], ids=["chat", "passthrough"])
def test_a_huge_model_name_is_clipped_in_the_request_line(fake, proxy, path: str) -> None:
    model = "gpt-4o-" + "x" * 1_000_000
    httpx.post(f"{proxy.base_url}/{path}", timeout=30, json={
        "model": model, "input": "hi", "messages": [{"role": "user", "content": "hi"}]})
    [line] = proxy.requests()
    [raw] = [r for r in proxy.logs.raw if '"event":"request"' in r]
    assert len(raw) < MAX_LINE, len(raw)
    assert line["model"].startswith("gpt-4o-xxx") and "1000007 chars" in line["model"]


def test_a_model_name_of_ordinary_length_is_logged_whole(fake, proxy) -> None:
    model = "ft:gpt-4o-mini-2024-07-18:my-org:custom-suffix:" + "a" * 200
    httpx.post(f"{proxy.base_url}/embeddings", timeout=30, json={"model": model, "input": "hi"})
    [line] = proxy.requests()
    assert line["model"] == model


def test_a_huge_model_name_is_clipped_in_the_compaction_events(make_fake, make_proxy) -> None:
    """The summarizer's model is the client's own unless configured."""
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    messages, _ = planted_session(200)
    model = "small-" + "x" * 100_000
    fake.script(Reply.text("ok"))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                        headers={"x-thread-id": "huge-model"},
                        json={"model": model, "messages": _prefix(messages, 12_600, 14_500)})
    assert answer.headers["x-compaction"] == "compacted"
    assert proxy.logs.events("compaction_completed")
    assert all(len(raw) < MAX_LINE for raw in proxy.logs.raw), \
        max(len(raw) for raw in proxy.logs.raw)
    [started] = proxy.logs.events("compaction_started")
    assert started["summarizer_model"].endswith("(100006 chars)")
