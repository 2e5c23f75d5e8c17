"""A chat client in one long tool loop, with a habit in what it keeps of each answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

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

    def turn(self, reply: Reply | None = None) -> tuple[int, int]:
        """One request (the answer's tool call and its result are kept when it passed): its
        status, and the upstream calls it made."""
        step = len(self.messages)
        self.fake.script(reply or Reply.tool_calls(call("read_file", {"path": f"m{step}.py"})))
        before = len(self.fake.requests)
        answer = httpx.post(f"{self.proxy.base_url}/chat/completions", timeout=30, headers={
            "authorization": f"Bearer {self.key}", "x-thread-id": self.thread},
            json={"model": self.model, "messages": self.messages})
        made = len([r for r in self.fake.requests[before:] if not is_summarizer_request(r.json)])
        if answer.status_code == 200:
            message = self.echo(answer.json()["choices"][0]["message"])
            self.messages.append(message)
            self.messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"{self.result} {step}"}
                              for c in message["tool_calls"]]
        return answer.status_code, made
