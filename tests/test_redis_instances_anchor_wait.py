"""An answer's anchor is in Redis before the answer's end reaches the client: a thread's next
turn, sent at once to the other instance, is estimated from it (chat and Responses, streamed
and not), however late the instance's queued writes go out.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import API_KEY
from tests.test_anchor_cut_answers import _chat_turn, _responses_turn
from tests.test_compaction_detached import GatedFake, gated  # noqa: F401
from tests.test_redis_instances import instances  # noqa: F401
from tests.test_redis_instances_streams import _renamed

# In both instances, every batch of queued Redis writes that adds an anchor is sent DELAY s
# late: a slow Redis, or an instance whose loop is busy.
LATE_ANCHORS = """
import asyncio
from proxy.store import redis_writer
from proxy.store.redis_eval import sha
from proxy.store.redis_scripts import ADD_ANCHOR
_send_one = redis_writer.QueuedWrites._send_one
_ANCHOR = sha(ADD_ANCHOR)
async def _late(self, batch):
    if any(len(command) > 1 and command[1] == _ANCHOR for command in batch):
        await asyncio.sleep(DELAY)
    await _send_one(self, batch)
redis_writer.QueuedWrites._send_one = _late
"""
SLOW_ANCHORS = LATE_ANCHORS.replace("DELAY", "0.3")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_the_next_turn_at_the_other_instance_finds_the_anchor_however_late_it_is_written(
        instances: Any, gated: GatedFake, api: str, stream: bool) -> None:  # noqa: F811
    a, b = instances(prelude=SLOW_ANCHORS)
    # Two turns a thread, each at the other instance: the second can only use the anchor of
    # the first answer, which the other instance wrote (a thread's later turns could use an
    # older anchor of their own instance, long written).
    for thread, first, then in (("a-then-b", a, b), ("b-then-a", b, a)):
        items: list[Any] = [{"role": "user", "content": "Plan the refactor."}]
        items += _turn(first, api, stream, f"{thread}-{api}", items)
        items.append({"role": "user", "content": "Go on."})
        _turn(then, api, stream, f"{thread}-{api}", items)
    # Read once every turn was sent: a wait for a line between turns would give the write time.
    at_a, at_b = a.wait_for("request", 2), b.wait_for("request", 2)
    lines = [at_a[0], at_b[0], at_b[1], at_a[1]]  # each thread's first turn, then its second
    assert [line["stream"] for line in lines] == [stream] * 4
    assert [bool(line.get("anchor_used")) for line in lines] == [False, True, False, True], lines


def _turn(proxy: Any, api: str, stream: bool, thread: str, items: list[Any]) -> list[Any]:
    """The answer's items, for the thread's next turn."""
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                       timeout=30) as client:
        renamed = _renamed(client)
        if api == "chat":
            return [_chat_turn(renamed, items, stream, thread)]
        response = _responses_turn(renamed, items, stream, thread)
        return [o.model_dump(exclude_none=True) for o in response.output]


@pytest.mark.parametrize("stream", [False, True])
def test_an_anchor_redis_does_not_take_in_time_costs_the_next_estimate_not_the_answer(
        instances: Any, gated: GatedFake, stream: bool) -> None:  # noqa: F811
    # Later than the answer waits (`SHARED_WAIT_S`): the answer goes out without it.
    [a] = instances(1, prelude=LATE_ANCHORS.replace("DELAY", "3"))
    items: list[Any] = [{"role": "user", "content": "Plan the refactor."}]
    [answer] = _turn(a, "chat", stream, "late-anchor", items)
    assert answer["content"]
    [line] = a.wait_for("request")
    assert (line["status"], line["usage_not_recorded"]) == (200, "TimeoutError")
    [warning] = a.wait_for("usage_not_recorded")
    assert (warning["error"], warning["thread"]) == ("TimeoutError", "late-anchor")
