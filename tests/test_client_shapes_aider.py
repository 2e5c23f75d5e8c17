"""An Aider-shaped session through compaction (`aider_shapes`): a long system prompt, few-shot
pairs, the repo map, the chat files' message and a closing system reminder rebuilt every turn,
no tools, `stop` sequences; and mid-thread the user switches to a smaller model with its own
profile, whose window the thread already overfills."""

from __future__ import annotations

import orjson

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.aider_shapes import REMINDER, STOP, aider_messages, answer
from tests.client_shapes import RESTORED, chat_anomalies, send_turns

BIG, SMALL = 24_000, 12_000
SWITCH = 15  # the turn the user runs `/model small-4o-mini`


def _body(turn: int) -> dict:
    model = "small-4o" if turn < SWITCH else "small-4o-mini"
    return {"model": model, "messages": aider_messages(turn), "stop": STOP, "temperature": 0}


def test_an_aider_session_switching_to_a_smaller_model_compacts_at_the_switch(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-4o": BIG, "small-4o-mini": SMALL})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-4o": {"max_input_tokens": BIG},
                                     "small-4o-mini": {"max_input_tokens": SMALL}})

    run = send_turns(proxy.base_url, fake, [(_body(t), Reply.text(answer(t))) for t in range(40)],
                     "aider")

    lines = proxy.requests()
    assert [line["compaction"] for line in lines[:SWITCH]] == ["none"] * SWITCH
    assert lines[SWITCH]["compaction"] == "compacted", "the thread overfills the small window"
    assert len(proxy.logs.events("compaction_completed")) >= 3
    assert not [line for line in lines if line.get("retried")], "no upstream overflow"
    for sent, received in zip(run.sent, run.upstream, strict=True):
        assert [p for p in chat_anomalies(sent, received) if p != RESTORED] == []
        model = orjson.loads(received)
        assert model["stop"] == STOP and model["temperature"] == 0
        assert model["messages"][-1] == {"role": "system", "content": REMINDER}
