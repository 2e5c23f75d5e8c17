"""The deprecated chat form of one tool call: `function_call` on the assistant message, answered
by a `role: "function"` message named after the function (PROTOCOL.md §1: `function_call` is
still accepted on assistant messages). Such a result is a tool result like any other: the kept
part of a compaction never starts with one (SPEC §5), and the summarizer reads what was called
with which arguments, not an empty assistant turn."""

from __future__ import annotations

import orjson

from proxy.compaction.transcript import render_blocks
from proxy.core.boundary import safe_cuts
from proxy.testing.summarizer import FakeSummarizer
from tests.client_shapes import FUNCTIONS, legacy_functions_session, replay
from tests.factories import assistant, chat, system, user

LIMIT = 16_000


def _calls(name: str, arguments: str) -> dict:
    return {"role": "assistant", "content": None,
            "function_call": {"name": name, "arguments": arguments}}


def _result(name: str, content: str) -> dict:
    return {"role": "function", "name": name, "content": content}


def test_a_cut_never_leaves_a_function_result_without_its_call() -> None:
    entries = chat(system(), user(), _calls("read_file", '{"path": "a.py"}'),
                   _result("read_file", "print(1)"), assistant("done"))
    assert safe_cuts(entries) == [True, True, True, False, True, True]


def test_the_transcript_names_the_legacy_call_and_its_result() -> None:
    entries = chat(user("Look at a.py"), _calls("read_file", '{"path": "src/a.py"}'),
                   _result("read_file", "print(1)"))
    text = "\n\n".join(b.text for b in render_blocks(entries, range(3), len, lambda e: 10))
    assert '{"path": "src/a.py"}' in text and "read_file" in text
    assert "(empty)" not in text
    assert "[result of tool read_file]\nprint(1)" in text


def _orphans(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "function"
            and not (messages[i - 1]["role"] == "assistant" and messages[i - 1].get("function_call"))]


def test_a_legacy_functions_session_keeps_every_result_after_its_call(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    messages = legacy_functions_session(200, seed=6)
    assert not _orphans(messages)

    run = replay(proxy.base_url, fake, messages, "legacy",
                 body=lambda k: {"model": "small-coder", "functions": FUNCTIONS})

    assert len(proxy.logs.events("compaction_completed")) >= 3
    for sent in run.upstream:
        assert not _orphans(orjson.loads(sent)["messages"])
