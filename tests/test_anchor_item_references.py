"""Anchors and `item_reference` echoes (SPEC §3, §6).

A client with `store: true` may echo a previous answer's output items by reference,
`{"type": "item_reference", "id": "msg_..."}`: upstream reads them from its store. The
reference names the id of the item the proxy relayed, so it is that item's echo: the answer's
anchor is used and covers it. A reference the proxy never relayed is counted by a guess, never
as the few tokens of its own JSON.
"""

from __future__ import annotations

from typing import Any

import openai

from proxy.testing.replies import Reply, call
from proxy.tokens.rules import REFERENCED_ITEM

MODEL = "gpt-5-mini"
THREAD = {"x-thread-id": "item-references"}
LONG_ANSWER = " ".join(f"word{i}" for i in range(600))


def _reference(item: Any) -> dict[str, str]:
    return {"type": "item_reference", "id": item.id}


def test_an_answer_echoed_by_reference_uses_its_anchor(client: openai.OpenAI, proxy,
                                                       fake) -> None:
    fake.script(Reply.text(LONG_ANSWER), Reply.text("Done."))
    history: list[Any] = [{"role": "user", "content": "Write it out."}]
    first = client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD)
    history += [_reference(item) for item in first.output]
    history.append({"role": "user", "content": "Go on."})
    second = client.responses.with_raw_response.create(model=MODEL, input=history, store=True,
                                                       extra_headers=THREAD)
    lines = proxy.requests()
    assert [line["anchor_used"] for line in lines] == [False, True]
    # The anchor's count holds the whole answer, not the reference's dozen tokens.
    assert first.usage is not None
    anchored = first.usage.input_tokens + first.usage.output_tokens
    assert lines[1]["tokens_estimate"] >= anchored
    assert int(second.headers["x-context-tokens"]) >= anchored


def test_a_tool_loop_echoed_partly_by_reference_uses_its_anchor(client: openai.OpenAI, proxy,
                                                                 fake) -> None:
    fake.script(Reply.tool_calls(call("read_file", {"path": "src/lexer.py"}),
                                 reasoning="Look at the lexer first."),
                Reply.text(LONG_ANSWER, reasoning="Now explain."), Reply.text("Done."))
    history: list[Any] = [{"role": "user", "content": "Read the lexer."}]
    first = client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD)
    kinds = [item.type for item in first.output]
    assert kinds == ["reasoning", "function_call"]
    # The reasoning by reference, the call whole as the SDK dumps it.
    history += [_reference(first.output[0]), first.output[1].model_dump(exclude_none=True)]
    history.append({"type": "function_call_output", "call_id": first.output[1].call_id,
                    "output": "def lex(): ..."})
    second = client.responses.create(model=MODEL, input=history, store=True,
                                     extra_headers=THREAD)
    assert [item.type for item in second.output] == ["reasoning", "message"]
    history += [_reference(item) for item in second.output]
    history.append({"role": "user", "content": "Thanks."})
    client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD)
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True, True]


def test_a_reference_the_proxy_never_relayed_is_not_counted_as_its_json(client: openai.OpenAI,
                                                                        proxy, fake,
                                                                        make_client) -> None:
    # Stored upstream by a call that did not pass through this proxy (another instance's).
    elsewhere = make_client(fake.url).responses.create(
        model=MODEL, input="Start.", store=True).output[0]
    history: list[Any] = [{"role": "user", "content": "Go on."}, _reference(elsewhere),
                          {"role": "user", "content": "And then?"}]
    client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD)
    line = proxy.requests()[-1]
    assert line["anchor_used"] is False
    assert line["tokens_estimate"] >= REFERENCED_ITEM


def test_a_streamed_answer_echoed_by_reference_uses_its_anchor(client: openai.OpenAI, proxy,
                                                               fake) -> None:
    fake.script(Reply.text(LONG_ANSWER, reasoning="Plan the text."), Reply.text("Done."))
    history: list[Any] = [{"role": "user", "content": "Write it out."}]
    with client.responses.stream(model=MODEL, input=history, store=True,
                                 extra_headers=THREAD) as stream:
        first = stream.get_final_response()
    history += [_reference(item) for item in first.output]
    history.append({"role": "user", "content": "Go on."})
    client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD)
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True]


def test_a_reasoning_item_echoed_by_reference_counts_its_reasoning(client: openai.OpenAI, proxy,
                                                                   fake) -> None:
    # Upstream reads the referenced reasoning item back (the fake counts its summary, the
    # whole reasoning here); the anchor's visible output does not hold it: the answer's
    # reasoning count does.
    thinking = " ".join(f"thought{i}" for i in range(800))
    fake.script(Reply.tool_calls(call("read_file", {"path": "src/lexer.py"}), reasoning=thinking),
                Reply.text("Done."))
    history: list[Any] = [{"role": "user", "content": "Read the lexer."}]
    first = client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD,
                                    reasoning={"summary": "auto"})
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    history += [_reference(item) for item in first.output]
    history.append({"type": "function_call_output", "call_id": first.output[1].call_id,
                    "output": "def lex(): ..."})
    second = client.responses.create(model=MODEL, input=history, store=True, extra_headers=THREAD,
                                     reasoning={"summary": "auto"})
    line = proxy.requests()[-1]
    assert line["anchor_used"] is True
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + 1000
    assert line["tokens_estimate"] >= second.usage.input_tokens
