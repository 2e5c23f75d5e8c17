"""`/compact` on a request that names no thread (`threads.fallback: none`): the proxy keeps no
state for it, so it answers the command itself and says why, as for any `/compact`; the
command never goes to the model as the conversation's last message (SPEC §8)."""

from __future__ import annotations

from proxy.compaction.manual import MARKER
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request

CONVERSATION = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "/compact"}]


def test_compact_without_a_thread_is_answered_not_forwarded(make_fake, make_proxy, make_client) -> None:
    fake = make_fake()
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, threads={"fallback": "none"})
    client = make_client(proxy.base_url)

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=CONVERSATION)
    text = raw.parse().choices[0].message.content
    assert raw.status_code == 200 and raw.headers["x-compaction"] == "none"
    assert text.startswith(MARKER) and "`x-thread-id`" in text and "no thread" in text
    assert summarizer.calls == 0
    assert not [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert proxy.requests()[-1]["manual_compact"] is True

    events = list(client.responses.create(model="gpt-4o", stream=True, input=[
        {"role": "user", "content": "hello"}, {"role": "user", "content": "/compact"}]))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text.startswith(MARKER)
    assert not fake.requests


def test_an_ordinary_request_without_a_thread_still_goes_up(make_fake, make_proxy, make_client) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, threads={"fallback": "none"})
    client = make_client(proxy.base_url)
    answer = client.chat.completions.create(model="gpt-4o", messages=CONVERSATION[:2])
    assert answer.choices[0].message.content and len(fake.requests) == 1
