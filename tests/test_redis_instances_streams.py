"""Streamed answers relayed by one instance anchor the thread's next turn at another (Redis):
a streamed chat answer and a streamed Responses answer, through the `openai` client.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import API_KEY
from tests.test_anchor_cut_answers import _chat_turn, _responses_turn
from tests.test_compaction_detached import GatedFake, gated  # noqa: F401
from tests.test_redis_instances import anchors_in_redis, instances  # noqa: F401


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_streamed_answer_at_one_instance_anchors_the_next_turn_at_another(
        instances: Any, gated: GatedFake, redis_url: str, redis_prefix: str,  # noqa: F811
        api: str) -> None:
    a, b = instances()
    thread = f"streamed-{api}"
    items: list[Any] = [{"role": "user", "content": "Plan the refactor."}]
    for turn in range(4):
        proxy = (a, b)[turn % 2]
        with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                           timeout=30) as client:
            client = _renamed(client)
            if api == "chat":
                items.append(_chat_turn(client, items, True, thread))
            else:
                response = _responses_turn(client, items, True, thread)
                items += [o.model_dump(exclude_none=True) for o in response.output]
        [*_, line] = proxy.wait_for("request", count=turn // 2 + 1)
        assert line["stream"] is True
        assert bool(line.get("anchor_used")) is (turn > 0), (turn, line)
        assert anchors_in_redis(redis_url, redis_prefix, thread) == turn + 1
        items.append({"role": "user", "content": f"Go on with step {turn + 1}."})


def _renamed(client: openai.OpenAI) -> Any:
    """`client`, its `create` calls asking for the instances' model."""
    class Create:
        def __init__(self, resource: Any) -> None:
            self.resource = resource

        def create(self, **kwargs: Any) -> Any:
            return self.resource.create(**{**kwargs, "model": "small-coder"})

    class Chat:
        completions = Create(client.chat.completions)

    class Renamed:
        chat = Chat()
        responses = Create(client.responses)

    return Renamed()
