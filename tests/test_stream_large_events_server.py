"""Large events (under the 16 MiB bound) come through the proxy whole and are read: a
Responses answer of 390 KB of text repeats it in `response.output_text.done`,
`response.output_item.done` and `response.completed`, each arriving in many reads and read
in place by the decoder (its data a view of its bytes)."""

from __future__ import annotations

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.store.keys import thread_key_text
from proxy.testing.replies import Reply

TEXT = "Ünïcode line of a long answer.\n" * (12 * 1024)  # 390 KB as UTF-8


def test_a_streamed_answer_of_megabytes_reaches_the_client_and_anchors(make_fake, make_proxy,
                                                                       make_client,
                                                                       loop_thread) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    client = make_client(proxy.base_url)
    fake.script(Reply.text(TEXT))
    stream = client.responses.create(model="gpt-5-mini", input=[{"role": "user", "content": "Write it all."}], stream=True,
                                     prompt_cache_key="large-events")
    events = list(stream)
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == TEXT
    done = [e for e in events if e.type == "response.output_text.done"]
    assert [e.text for e in done] == [TEXT]
    line = proxy.requests()[-1]
    assert line["status"] == 200 and "unread" not in line, line
    pipeline = proxy.app[SERVICES].pipeline
    state = loop_thread.run(pipeline.store.load(ThreadKey(line["tenant"],
                                                          thread_key_text("large-events"))))
    assert len(state.anchors) == 1  # the answer was read whole: its usage anchors the next turn
