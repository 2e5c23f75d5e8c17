"""A thread whose checkpoint no longer applies (the client changed the part it summarizes: an
edit, a branch, or its own trimming of its oldest messages) is summarized afresh (SPEC §5), and
the operator is told why: `checkpoint_stale` on the request's line, `stale_checkpoint` on that
`compaction_started`. A client that trims its history every turn shows up so, instead of as a
thread that compacts on every request for no visible reason."""

from __future__ import annotations

from typing import Any

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer

MODELS = {"small-*": {"max_input_tokens": 4_000}}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"question {i}: " + "details " * 120},
            {"role": "assistant", "content": f"answer {i}: " + "reasons " * 120}]


def test_a_client_trimming_its_oldest_messages_is_told_apart(make_fake, make_proxy,
                                                             make_client) -> None:  # type: ignore[no-untyped-def]
    fake = make_fake(limits={"small-*": 4_000})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    client = make_client(proxy.base_url)
    history = [message for i in range(16) for message in _turn(i)]

    def send(messages: list[dict[str, Any]]) -> dict[str, Any]:
        fake.script(Reply.text("ok"))
        client.chat.completions.create(model="small-1", messages=[SYSTEM, *messages],
                                       extra_headers={"x-thread-id": "trimming"})
        return proxy.requests()[-1]

    first = send(history[:-1])
    assert first["compaction"] == "compacted" and "checkpoint_stale" not in first
    again = send(history[:-1])  # the same list: the checkpoint applies
    assert again["compaction"] == "applied" and "checkpoint_stale" not in again
    calls = summarizer.calls
    trimmed = send(history[4:-1])  # the client dropped its two oldest turns itself
    assert trimmed.get("checkpoint_stale") is True, {k: trimmed.get(k) for k in ("compaction", "checkpoint", "compaction_reused", "tokens_estimate", "note")}
    assert summarizer.calls > calls, "summarized afresh, as SPEC §5 asks"
    started = proxy.logs.events("compaction_started")
    assert [event.get("stale_checkpoint") for event in started] == [None, True]
