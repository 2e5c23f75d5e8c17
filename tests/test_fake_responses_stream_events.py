"""The fake's Responses streams keep the event grammar of PROTOCOL.md §6.3: `sequence_number`s
0, 1, 2, ... without a gap (an error event included), every `response.output_item.added` closed
by one `response.output_item.done` of the same `output_index` and item before the next item
opens, the inner events of an item carrying its `item_id` and `output_index` (and
`content_index` / `summary_index` of a part that was added), usage only in the terminal event,
and the terminal response's output the items that were done, in order."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply, call
from tests.test_fake_responses import parse_events

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_REPLIES = {
    "text": Reply.text("Hello there, this is a longer answer split in pieces."),
    "reasoning_and_text": Reply.text("Forty-two.", reasoning="Adding the numbers up."),
    "parallel_calls": Reply.tool_calls(call("read_file", {"path": "a.py"}),
                                       call("grep", {"pattern": "def "}), content="Looking."),
    "custom_call": Reply.tool_calls(call("apply_patch", "*** Begin Patch\n*** End Patch", custom=True)),
    "cut_short": Reply.length("An answer the token limit cut"),
    "error_mid_stream": Reply.stream_error(after=3),
    "error_after_the_end": Reply.stream_error(after=500, content="ok"),
}


async def stream(fake: FakeUpstream, reply: Reply,
                 model: str = "gpt-5") -> list[tuple[str, dict[str, Any]]]:
    fake.script(reply)
    payload = {"model": model, "input": "hi " * 50, "stream": True,
               "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"]}
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/responses", json=payload) as response:
            assert response.status == 200
            return parse_events(await response.read())


def grammar_faults(events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    faults = []
    numbers = [data.get("sequence_number") for _, data in events]
    if numbers != list(range(len(events))):
        faults.append(f"sequence numbers {numbers}")
    faults += [f"event {kind} says type {data.get('type')}" for kind, data in events
               if data.get("type") != kind]
    open_item: dict[str, Any] | None = None
    done: list[dict[str, Any]] = []
    parts: set[tuple[str, int]] = set()
    for kind, data in events:
        if kind == "response.output_item.added":
            if open_item is not None or data["output_index"] != len(done):
                faults.append(f"item {data['output_index']} added out of turn")
            open_item = data["item"]
        elif kind == "response.output_item.done":
            if open_item is None or data["item"]["id"] != open_item["id"] \
                    or data["output_index"] != len(done):
                faults.append(f"item {data['output_index']} done without its added")
            done.append(data["item"])
            open_item, parts = None, set()
        elif "item_id" in data:
            if open_item is None or data["item_id"] != open_item["id"] \
                    or data.get("output_index") != len(done):
                faults.append(f"{kind} outside its item")
            for key in ("content_index", "summary_index"):
                if key in data:
                    if kind.endswith("part.added"):
                        parts.add((key, data[key]))
                    elif (key, data[key]) not in parts:
                        faults.append(f"{kind} names {key} {data[key]} never added")
        elif kind in _TERMINAL:
            if open_item is not None:
                faults.append("the response ended with an item open")
            if [i["id"] for i in data["response"]["output"]] != [i["id"] for i in done]:
                faults.append("the terminal output is not the items done")
            if data["response"].get("usage") is None:
                faults.append("no usage in the terminal event")
        elif kind in ("response.created", "response.in_progress"):
            if data["response"].get("usage") is not None:
                faults.append(f"usage in {kind}")
    return faults


@pytest.mark.parametrize("name", list(_REPLIES))
async def test_a_stream_keeps_the_event_grammar(name: str) -> None:
    async with FakeUpstream() as fake:
        events = await stream(fake, _REPLIES[name])
    assert grammar_faults(events) == []
    kinds = [kind for kind, _ in events]
    if name.startswith("error"):
        assert kinds[-1] == "error"
    else:
        assert kinds[-1] in _TERMINAL


async def test_an_overflow_reported_in_the_stream_keeps_the_grammar() -> None:
    async with FakeUpstream(limits={"small-*": 10}) as fake:
        events = await stream(fake, Reply.text("never sent"), model="small-x")
    assert grammar_faults(events) == [] and events[-1][0] == "error"


def test_the_checker_finds_a_gap_and_an_unpaired_item() -> None:
    added = ("response.output_item.added", {"type": "response.output_item.added",
                                            "sequence_number": 0, "output_index": 0,
                                            "item": {"id": "msg_1"}})
    late = ("response.completed", {"type": "response.completed", "sequence_number": 2,
                                   "response": {"output": [], "usage": {}}})
    assert grammar_faults([added, late]) == [
        "sequence numbers [0, 2]", "the response ended with an item open",
    ]
