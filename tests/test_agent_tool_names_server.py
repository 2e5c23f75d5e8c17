"""A Claude-Code-style session (Read, Grep, Glob, LS, WebSearch, TodoWrite) through the
proxy with a small window: old exploration runs reach the model collapsed, and after the
summary the files it read and its TODO list come back."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, replay, summary_of

MODELS = {"small-*": {"max_input_tokens": LIMIT}}
# The synthetic session's names, as a Claude-Code-style agent spells them and its arguments.
RENAMED = {"read_file": "Read", "grep": "Grep", "glob": "Glob", "list_dir": "LS",
           "web_search": "WebSearch", "todo_write": "TodoWrite"}


def _claude_style(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    renamed = []
    for call in calls:
        name = call["function"]["name"]
        args = orjson.loads(call["function"]["arguments"])
        if name == "read_file":
            args = {"file_path": args.pop("path"), **args}
        renamed.append({**call, "function": {"name": RENAMED.get(name, name),
                                             "arguments": orjson.dumps(args).decode()}})
    return {**message, "tool_calls": renamed}


@pytest.fixture
def small(make_fake, make_proxy):
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    return fake, make_proxy(fake, models=MODELS)


def test_claude_style_runs_collapse_and_reads_and_todos_come_back(small) -> None:
    fake, proxy = small
    messages = [_claude_style(m) for m in coding_session(160, seed=11)]
    assert any(c["function"]["name"] == "Read" for m in messages for c in m.get("tool_calls", ()))
    run = replay(proxy.base_url, fake, messages, "claude-style")
    assert proxy.logs.events("compaction_completed"), "the session never compacted"
    records = {m["content"] for body in run.upstream for m in orjson.loads(body)["messages"]
               if isinstance(m.get("content"), str) and "earlier exploration call" in m["content"]}
    lines = [line for record in records for line in record.splitlines()[1:]]
    assert any(line.startswith('- Read {"file_path":') for line in lines)
    assert any(line.startswith('- Grep {"pattern":') for line in lines)
    summarized = [body for body in run.upstream if summary_of(body) is not None]
    assert summarized
    restored = [m["content"] for body in summarized for m in orjson.loads(body)["messages"]
                if isinstance(m.get("content"), str)
                and m["content"].startswith("Restored after context compaction")]
    assert any("earlier with Read" in text for text in restored), "no file restored"
    assert any("as last set with TodoWrite" in text for text in restored), "no plan restored"
