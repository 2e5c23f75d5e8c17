"""State kept upstream, continued across instances on one Redis: a `previous_response_id`
chain and a conversation, each turn at the other instance, with two upstreams routed by model.

Each turn names a model routed to `fake` while the chain (or the conversation) lives on
`other`: only the id's origin, which the instance that relayed the answer wrote to Redis, sends
the turn where its state is. The fakes answer an id they do not hold as OpenAI does (400
`previous_response_not_found`, 404 for a conversation), so a turn sent by its model fails.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
import redis as sync_redis

from proxy.testing.replies import Reply
from tests.conftest import API_KEY
from tests.redis_responses import (MODEL, OTHER_MODEL, ROUTES, Rig, main_requests,  # noqa: F401
                                   rig)


def _turn(rig: Rig, at: int, stream: bool, **kwargs: Any) -> Any:
    proxy = (rig.a, rig.b)[at % 2]
    with rig.client(proxy) as client:
        if not stream:
            return client.responses.create(**kwargs)
        with client.responses.stream(**kwargs) as events:
            kinds = [event.type for event in events]
            assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
            return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_chain_alternating_instances_stays_on_the_upstream_that_made_it(
        rig: Any, stream: bool) -> None:  # noqa: F811
    r = rig()
    r.other.script(*(Reply.text(f"answer {n}") for n in range(6)))
    first = _turn(r, 0, stream, model=OTHER_MODEL, input="Remember the number 7.")
    previous = first
    for n in range(1, 6):
        answer = _turn(r, n, stream, model=MODEL, input=f"Step {n}: which number?",
                       previous_response_id=previous.id)
        assert answer.output_text == f"answer {n}"
        sent = main_requests(r.other)[-1].json
        assert sent["previous_response_id"] == previous.id and sent["model"] == MODEL
        previous = answer
    assert main_requests(r.fake) == []
    assert len(main_requests(r.other)) == 6
    # Either instance retrieves any answer of the chain from where it was made.
    for proxy in (r.a, r.b):
        with r.client(proxy) as client:
            assert client.responses.retrieve(first.id).output_text == "answer 0"
    lines = [line for proxy in (r.a, r.b) for line in proxy.wait_for("request", 4)]
    continued = [line for line in lines if line.get("previous_response_id")]
    assert len(continued) == 5
    assert all(line["upstream"] == "other" and line["routed_by"] == "id" for line in continued)


def test_a_conversation_made_at_one_instance_is_continued_at_the_other(rig: Any) -> None:  # noqa: F811
    r = rig()
    with r.client(r.a) as client:
        made = client.conversations.create(items=[{"type": "message", "role": "user",
                                                   "content": "Remember the number 7."}],
                                           extra_query={"model": OTHER_MODEL})
    r.other.script(Reply.text("Noted."), Reply.text("7"), Reply.text("Still 7."))
    for n, text in enumerate(["Noted.", "7", "Still 7."]):
        answer = _turn(r, n + 1, n == 1, model=MODEL, input=f"Turn {n}.", conversation=made.id)
        assert answer.output_text == text and answer.conversation.id == made.id
    with r.client(r.b) as client:
        items = client.conversations.items.list(made.id, order="asc")
        texts = [part.text for item in items.data if item.type == "message"
                 for part in item.content]
        assert texts == ["Remember the number 7.", "Turn 0.", "Noted.", "Turn 1.", "7",
                         "Turn 2.", "Still 7."]
        assert client.conversations.delete(made.id).deleted is True
    assert main_requests(r.fake) == []


# In both instances, every batch of queued Redis writes that sets a key (an origin) is sent
# 0.3 s late: a slow Redis, or an instance whose loop is busy.
SLOW_ORIGINS = """
import asyncio
from proxy.store import redis_writer
_send_one = redis_writer.QueuedWrites._send_one
async def _late(self, batch):
    if any(command and command[0] == "SET" for command in batch):
        await asyncio.sleep(0.3)
    await _send_one(self, batch)
redis_writer.QueuedWrites._send_one = _late
"""


@pytest.mark.parametrize("stream", [False, True])
def test_the_next_turn_at_the_other_instance_finds_the_origin_however_late_it_is_written(
        rig: Any, stream: bool) -> None:  # noqa: F811
    """The answer's end reaches the client only once its origin is in Redis: a client whose
    next turn is at the other instance at once must not find it missing."""
    r = rig(prelude=SLOW_ORIGINS)
    previous = _turn(r, 0, stream, model=OTHER_MODEL, input="Remember the number 7.")
    for n in range(1, 4):
        previous = _turn(r, n, stream, model=MODEL, input=f"Step {n}.",
                         previous_response_id=previous.id)
    with r.client(r.a) as client:
        made = client.conversations.create(extra_query={"model": OTHER_MODEL})
    assert _turn(r, 1, stream, model=MODEL, input="Hi.", conversation=made.id).conversation.id \
        == made.id
    assert main_requests(r.fake) == [] and len(main_requests(r.other)) == 5


def test_a_redis_that_does_not_take_the_origin_holds_the_answer_a_second_at_most(
        make_fake: Any, make_proxy: Any, redis_server: Any, redis_prefix: str) -> None:
    main, other = make_fake(), make_fake()
    proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}}, routes=ROUTES,
                       state={"backend": "redis",
                              "redis": {"url": redis_server.url, "prefix": redis_prefix}})
    admin = sync_redis.Redis.from_url(redis_server.url)
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                       timeout=20) as client:
        first = client.responses.create(model=OTHER_MODEL, input="Remember the number 7.")
        admin.execute_command("CLIENT", "PAUSE", 4000, "WRITE")
        try:
            began = time.monotonic()
            second = client.responses.create(model=MODEL, input="Which number?",
                                             previous_response_id=first.id)
            waited = time.monotonic() - began
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
            admin.close()
    assert second.status == "completed" and 0.9 < waited < 2.5
    assert [e["event"] for e in proxy.logs.events("origin_not_recorded")] == ["origin_not_recorded"]
    assert main.requests == []
