"""Replaying a coding-agent session through the proxy, turn by turn, as an agent would."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy.compaction.apply import SUMMARY_HEADER
from proxy.jsonspan import locate_array
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY

MODEL = "small-coder"
LIMIT = 16_000


def planted_session(n_messages: int, seed: int = 7, every: int = 2,
                    tag: str = "checkpoint-code") -> tuple[list[dict[str, Any]], list[str]]:
    """A session whose user messages carry `FACT:` lines a faithful summary must keep."""
    messages = coding_session(n_messages, seed=seed)
    facts = []
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    for n, i in enumerate(users[::every]):
        fact = f"FACT: {tag}-{n:03d} belongs to {messages[i]['content'][:12]!r}"
        facts.append(fact)
        messages[i] = {**messages[i], "content": f"{messages[i]['content']}\n{fact}"}
    return messages, facts


@dataclass
class Replay:
    statuses: list[int] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)  # what the client sent, per turn
    upstream: list[bytes] = field(default_factory=list)  # what the model received, per turn
    headers: list[httpx.Headers] = field(default_factory=list)


def up_to_last_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` up to and with their last user message: a request the client could send."""
    return next(messages[:k] for k in range(len(messages), 0, -1)
                if messages[k - 1]["role"] == "user")


def thinking_session(n_messages: int, seed: int) -> list[dict[str, Any]]:
    """A coding session whose assistant messages carry `reasoning_content` (DeepSeek's and
    Kimi's thinking modes), each naming its step."""
    return [{**m, "reasoning_content": f"thinking before step {i}"} if m["role"] == "assistant"
            else m for i, m in enumerate(coding_session(n_messages, seed=seed))]


def replay(base_url: str, fake: FakeUpstream, messages: list[dict[str, Any]], thread: str,
           *, stop: Callable[[int], bool] | None = None, start: int = 1,
           key: str = API_KEY) -> Replay:
    """Send `messages[:k]` at every k where the model speaks next, scripting that answer."""
    out = Replay()
    with httpx.Client(timeout=60) as client:
        for k in range(start, len(messages)):
            if messages[k]["role"] != "assistant":
                continue
            if stop is not None and stop(k):
                break
            fake.script(Reply.repeating(messages[k]))
            body = orjson.dumps({"model": MODEL, "messages": messages[:k]})
            answer = client.post(f"{base_url}/chat/completions", content=body,
                                 headers={"content-type": "application/json",
                                          "authorization": f"Bearer {key}", "x-thread-id": thread})
            out.statuses.append(answer.status_code)
            out.sent.append(body)
            out.headers.append(answer.headers)
            main = [r for r in fake.requests if r.path.endswith("/chat/completions")
                    and not is_summarizer_request(r.json)]
            out.upstream.append(main[-1].body if main else b"")
            assert answer.status_code == 200, answer.text
    return out


def elements(body: bytes) -> tuple[bytes, ...]:
    doc = orjson.loads(body)
    spans = locate_array(body, "messages", doc["messages"])
    assert spans is not None
    return spans.elements


def common_suffix(a: tuple[bytes, ...], b: tuple[bytes, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def summary_of(body: bytes) -> str | None:
    for message in orjson.loads(body)["messages"]:
        content = message.get("content")
        if isinstance(content, str) and content.startswith(SUMMARY_HEADER):
            return content
    return None


def task_then_loop(task_lines: int, steps: int) -> list[dict[str, Any]]:
    """One long task statement, then a tool loop: the latest user message is the first one.

    A request of the whole list ends inside the loop, so a compaction summarizes the task."""
    task = "".join(f"requirement {i:04d}: keep this line\n" for i in range(task_lines))
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                 {"role": "user", "content": task}]
    for i in range(steps):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "run", "arguments": f'{{"cmd": "make step{i}"}}'}}
        out += [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{i}",
                 "content": "".join(f"step {i} output line {j}\n" for j in range(150))}]
    return out
