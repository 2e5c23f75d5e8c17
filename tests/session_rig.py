"""A real proxy and the fake upstream, driven one client request at a time, on a test's clock.

For properties over whole sessions (SPEC §2, §4, §5): a `Rig` starts a fresh fake upstream
(with the fake summarizer) and a fresh proxy in front of it, with a small model window so
compaction happens within a few dozen messages. `send` posts a prefix of a recorded session,
the fake answering with the session's next model output, and returns what that one request
produced: status, the `x-context-tokens` / `x-compaction` headers, every upstream body it
caused (summarizer calls included, in order) and its request log line.

The pipeline's clock is the rig's, so idle time (microcompact, SPEC §4.3) is whatever the test
says. `restart` replaces the proxy with a new one on the same state. Only one rig may run at a
time: the proxy's log goes to the proxy started last.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

import httpx
import orjson

from proxy.jsonspan import locate_array
from proxy.records import CompactionEvent, ThreadKey, ThreadState
from proxy.server.services import SERVICES
from proxy.testing.fake_upstream import FakeUpstream, Recorded
from proxy.testing.replies import Reply, call
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.harness import LoopThread, RunningProxy, proxy_settings, start_proxy, stop_proxy

MODEL = "small-coder"
Wire = dict[str, Any]


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Sent:
    status: int
    tokens: str | None  # x-context-tokens
    compaction: str | None  # x-compaction
    upstream: tuple[bytes, ...]  # every upstream body the request caused, in order
    line: Mapping[str, Any]  # the request's log line

    @property
    def main(self) -> bytes | None:
        """The last body sent to the model itself (a retry's, when there was one)."""
        bodies = [b for b in self.upstream if not is_summarizer_request(orjson.loads(b))]
        return bodies[-1] if bodies else None


def model_made(api: str, element: Wire) -> bool:
    if api == "chat":
        return element.get("role") == "assistant"
    kind = element.get("type")
    return (kind == "message" and element.get("role") == "assistant") or \
        kind in ("function_call", "custom_tool_call", "reasoning")


def turn_points(api: str, elements: Sequence[Wire]) -> list[int]:
    """Where a client asks the model: before each run of model output."""
    return [k for k in range(1, len(elements))
            if model_made(api, elements[k]) and not model_made(api, elements[k - 1])]


def reply_at(api: str, elements: Sequence[Wire], k: int) -> Reply:
    """The fake's answer: the session's model output starting at `k`, as recorded."""
    if api == "chat":
        return Reply.repeating(elements[k])
    text, calls = None, []
    for element in elements[k:]:
        if not model_made(api, element):
            break
        if element.get("type") == "message":
            text = "".join(p.get("text", "") for p in element["content"])
        elif element.get("type") == "function_call":
            calls.append(call(element["name"], element["arguments"], id=element["call_id"]))
    return Reply.tool_calls(*calls, content=text) if calls else Reply.text(text or "")


def body_elements(api: str, body: bytes) -> tuple[bytes, ...]:
    """The bytes of each message (or input item) of a request body."""
    key = "messages" if api == "chat" else "input"
    spans = locate_array(body, key, orjson.loads(body)[key])
    assert spans is not None
    return spans.elements


class Upstream(FakeUpstream):
    """The fake upstream (its prompt cache kept per credential, as providers keep one per
    organization). With `counts_more`, its tokenizer counts a quarter more than
    the proxy estimates (a model the proxy has no tokenizer for): its usage, stored as
    anchors, then decides the estimate (SPEC §6) instead of the proxy's conservative count,
    which otherwise always comes out higher."""

    def __init__(self, counts_more: bool, **options: Any) -> None:
        super().__init__(**options)
        self.counts_more = counts_more

    def turn(self, body: Mapping[str, Any], reply: Reply, prompt: int, units: list[Any],
             credential: str = "", **options: Any) -> Any:
        return super().turn(body, reply, prompt * 5 // 4 if self.counts_more else prompt, units,
                            credential, **options)


class Rig:
    def __init__(self, loop: LoopThread, limit: int, counts_more: bool = False, **sections: Any) -> None:
        self.loop = loop
        self.clock = Clock()
        self.reply: Reply | None = None
        self.fake = Upstream(counts_more, limits={"small-*": limit})
        self._state = tempfile.TemporaryDirectory(prefix="rig-")
        loop.run(self.fake.start())
        self.fake.responder = lambda recorded: self.reply
        FakeSummarizer.install(self.fake)  # answers summarizer requests before the responder
        self.settings = proxy_settings(self.fake.url, self._state.name,
                                       models={"small-*": {"max_input_tokens": limit}}, **sections)
        self.proxy = self._start()
        self.http = httpx.Client(timeout=60)

    def _start(self) -> RunningProxy:
        proxy = self.loop.run(start_proxy(self.settings))
        pipeline = proxy.app[SERVICES].pipeline
        # `build_app` takes no clock; these two are the only readers of the time that decide.
        pipeline.clock = pipeline.compactor.clock = self.clock
        return proxy

    def restart(self) -> None:
        """A new proxy process, as far as state goes: what it knows comes from the store."""
        self.loop.run(stop_proxy(self.proxy))
        self.proxy = self._start()

    def stored(self, tenant: str, thread: str) -> tuple[ThreadState, list[CompactionEvent], bytes]:
        """What the state holds for (tenant, thread) as a restarted proxy reads it back: the
        thread's state, its checkpoints and its history file (SPEC §1, §5)."""
        self.restart()
        pipeline = self.proxy.app[SERVICES].pipeline
        key = ThreadKey(tenant, thread)
        state = self.loop.run(pipeline.store.load(key))
        events = [self._relative(e) for e in self.loop.run(pipeline.store.events(key))]
        path = pipeline.history.path_for(key)
        state = replace(state, event=self._relative(state.event) if state.event else None)
        return state, events, path.read_bytes() if path.exists() else b""

    def _relative(self, event: CompactionEvent) -> CompactionEvent:
        """The event with its history file's path inside the state directory, which is a
        temporary directory of its own for each rig."""
        if event.history_file is None:
            return event
        return replace(event, history_file=os.path.relpath(event.history_file, self._state.name))

    def send(self, api: str, elements: Sequence[Wire], k: int, headers: Mapping[str, str],
             at: float, body: Mapping[str, Any] | None = None) -> Sent:
        """Post `elements[:k]` at time `at`; the model answers with what the session says."""
        self.clock.now = at
        self.reply = reply_at(api, elements, k)
        key, path = ("messages", "chat/completions") if api == "chat" else ("input", "responses")
        content = orjson.dumps({"model": MODEL, key: list(elements[:k]), **(body or {})})
        before = len(self.fake.requests)
        answer = self.http.post(f"{self.proxy.base_url}/{path}", content=content,
                                headers={"content-type": "application/json", **headers})
        self.proxy.logs.settle()  # the usage anchor is recorded after the answer went out
        recorded: list[Recorded] = self.fake.requests[before:]
        lines = self.proxy.requests()
        return Sent(answer.status_code, answer.headers.get("x-context-tokens"),
                    answer.headers.get("x-compaction"), tuple(r.body for r in recorded),
                    lines[-1] if lines else {})

    def close(self) -> None:
        self.http.close()
        self.loop.run(stop_proxy(self.proxy))
        self.loop.run(self.fake.stop())
        self._state.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
