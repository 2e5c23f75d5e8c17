"""A chat client in one long tool loop, with a habit in what it keeps of each answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson

from proxy.testing.replies import Reply, call
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY

Echo = Callable[[dict[str, Any]], dict[str, Any]]


class ToolLoopClient:
    def __init__(self, proxy: Any, fake: Any, echo: Echo, *, thread: str = "t",
                 model: str = "m-1", key: str = API_KEY, result: str = "source") -> None:
        self.proxy, self.fake, self.echo, self.result = proxy, fake, echo, result
        self.thread, self.model, self.key = thread, model, key
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]

    def turn(self, reply: Reply | None = None, *, stream: bool = False) -> tuple[int, int]:
        """One request (the answer's tool call and its result are kept when it passed): its
        status, and the upstream calls it made."""
        step = len(self.messages)
        self.fake.script(reply or Reply.tool_calls(call("read_file", {"path": f"m{step}.py"})))
        before = len(self.fake.requests)
        body = {"model": self.model, "messages": self.messages, "stream": stream}
        with httpx.stream("POST", f"{self.proxy.base_url}/chat/completions", timeout=30,
                          headers={"authorization": f"Bearer {self.key}",
                                   "x-thread-id": self.thread}, json=body) as answer:
            data = answer.read()
        made = len([r for r in self.fake.requests[before:] if not is_summarizer_request(r.json)])
        if answer.status_code == 200:
            message = self.echo(_streamed(data) if stream else orjson.loads(data)["choices"][0]["message"])
            self.messages.append(message)
            self.messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"{self.result} {step}"}
                              for c in message["tool_calls"]]
        return answer.status_code, made


def _streamed(data: bytes) -> dict[str, Any]:
    """The assistant message a client assembles from a chat stream's deltas."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    for line in data.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        for choice in orjson.loads(line[6:]).get("choices") or ():
            delta = choice.get("delta") or {}
            for key in ("content", "reasoning_content"):
                if delta.get(key):
                    message[key] = (message.get(key) or "") + delta[key]
            for part in delta.get("tool_calls") or ():
                found = calls.setdefault(part["index"], {"type": "function", "function": {
                    "name": "", "arguments": ""}})
                found["id"] = part.get("id") or found.get("id")
                if part.get("extra_content"):
                    found["extra_content"] = part["extra_content"]
                function = part.get("function") or {}
                found["function"]["name"] += function.get("name") or ""
                found["function"]["arguments"] += function.get("arguments") or ""
    message["tool_calls"] = [calls[k] for k in sorted(calls)]
    return message
