"""Responses turns that depend on what the other instance did, on one Redis: a `/compact`
sent as a Responses input at one instance and the next turn at the other; a retry that strips
refused provider-private state (SPEC §7.4) at one instance and the thread's next turns.

Retry lessons (README, Provider-private reasoning) live in each process's memory, not in the
store: the other instance pays the refused round trip once itself, then knows it too.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compaction.manual import MARKER
from proxy.testing.summarizer import FakeSummarizer
from tests.redis_responses import MODEL, Rig, main_requests, rig  # noqa: F401
from tests.test_redis_instances_responses_compaction import codex_turns, has_summary


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _ask(r: Rig, at: int, history: list[dict[str, Any]], thread: str, stream: bool) -> Any:
    with r.client((r.a, r.b)[at]) as client:
        kwargs = dict(model=MODEL, input=history, store=False, prompt_cache_key=thread,
                      include=["reasoning.encrypted_content"])
        if not stream:
            return client.responses.create(**kwargs)
        with client.responses.stream(**kwargs) as events:
            return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_a_compact_command_at_one_instance_shapes_the_next_turn_at_the_other(
        rig: Any, stream: bool) -> None:  # noqa: F811
    r = rig(always_reason=True)
    summarizer = FakeSummarizer.install(r.fake)
    history = codex_turns([r.a.base_url, r.b.base_url], r.fake, "manual", 8)
    before = len(main_requests(r.fake))
    command = [*history, _user("/compact keep the file names")]
    answer = _ask(r, 0, command, "manual", stream)
    assert answer.output_text.startswith(f"{MARKER} Compacted")
    assert len(main_requests(r.fake)) == before and summarizer.calls == 1
    follow = [*command, *(item.model_dump(exclude_none=True) for item in answer.output)]
    # The same command again, at the other instance: nothing new since A's checkpoint.
    again = _ask(r, 1, [*follow, _user("/compact")], "manual", stream)
    assert again.output_text.startswith(f"{MARKER} Nothing new to compact")
    assert summarizer.calls == 1
    went_on = _ask(r, 1, [*follow, _user("Continue.")], "manual", stream)
    assert went_on.status == "completed"
    sent = main_requests(r.fake)[-1].json
    assert has_summary(sent) and len(main_requests(r.fake)) == before + 1
    assert not any("/compact" in str(i) or MARKER in str(i) for i in sent["input"])
    [completed] = r.a.wait_for("compaction_completed")
    line = r.b.wait_for("request", 6)[-1]  # 4 of the 8 turns, the command, this turn
    assert line["compaction"] == "applied" and line["checkpoint"] == completed["seq"] == 1
    assert not r.b.events("compaction_started")


def _forged(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with its first reasoning item's blob replaced by one the fake never issued
    (as a blob another organisation's key made is)."""
    first = next(k for k, item in enumerate(history) if item.get("type") == "reasoning")
    return [*history[:first], {**history[first], "encrypted_content": "gAAAAABforeign"},
            *history[first + 1:]]


def test_a_strip_retry_at_one_instance_is_learned_there_and_paid_once_at_the_other(
        rig: Any) -> None:  # noqa: F811
    r = rig(always_reason=True)
    history = _forged(codex_turns([r.a.base_url], r.fake, "strip", 3))
    upstream: list[int] = []
    for turn, at in enumerate([0, 1, 0, 1, 0]):
        before = len(main_requests(r.fake))
        history.append(_user(f"Go on with step {turn}."))
        answer = _ask(r, at, history, "strip", turn % 2 == 1)
        assert answer.status == "completed"
        history.extend(item.model_dump(exclude_none=True) for item in answer.output)
        upstream.append(len(main_requests(r.fake)) - before)
    # A: refused then stripped; B: the same (no lesson of A's); then each knows it.
    assert upstream == [2, 2, 1, 1, 1]
    refused = [x for x in main_requests(r.fake) if "gAAAAABforeign" in x.body.decode()]
    assert len(refused) == 2
    # The lines are read from the processes' output: wait for the last one of each.
    at_a, at_b = r.a.wait_for("request", 6)[-3:], r.b.wait_for("request", 2)
    assert [bool(line.get("retried")) for line in at_a] == [True, False, False]
    assert [bool(line.get("retried")) for line in at_b] == [True, False]
    assert [bool(line.get("retry_lesson")) for line in at_a] == [False, True, True]
    assert [bool(line.get("retry_lesson")) for line in at_b] == [False, True]
