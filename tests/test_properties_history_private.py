"""History files carry no provider-private state (SPEC §7.1) and the rest of each summarized
message as the client sent it (SPEC §5: the summarized raw messages, sanitized; §7: visible
text, tool calls and tool results are never touched), for messy conversations of both APIs.

A `Compactor` with a real `HistoryFiles` in a temporary directory, a summarizer upstream that
answers at once and an in-memory store runs one compaction (partial at a drawn kept tail, or
full, after a drawn earlier cut or none); the lines are then read back from disk. Plain
reasoning is marked first (`tests.strategies.marked`) so that any of it shows up by substring.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from hypothesis import event, given
from hypothesis import strategies as st

from proxy.compaction.cutoff import Previous
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Api, leading_instructions
from proxy.records import CompactionEvent, ThreadKey, ThreadState
from proxy.server.compactor import CompactionFailed, Compactor, Job, NothingToCompact
from proxy.store import HistoryFiles
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from tests.factories import entries_of, measure, without_gemini_signature
from tests.harness import proxy_settings
from tests.strategies import SECRETS, conversations, marked
from tests.test_compaction_support import ids_of

KEY = ThreadKey("tenant", "thread")
SETTINGS = proxy_settings("http://127.0.0.1:9", "/nonexistent")
ESTIMATOR = TokenEstimator(load_tokenizer("cl100k_base"))
# Keys and part/item types that only hold provider-private state (PROTOCOL.md §4).
PRIVATE_KEYS = {"reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
                "reasoning_items", "provider_specific_fields", "encrypted_content",
                "thought_signature", "signature"}
PRIVATE_TYPES = {"reasoning", "compaction", "thinking", "redacted_thinking"}
REPLY = orjson.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
    "role": "assistant", "content": "The user works on src/app.py."}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}})


class _Answer:
    status = 200
    headers: dict[str, str] = {}  # noqa: RUF012 - read only, as an aiohttp response's

    async def __aenter__(self) -> _Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return REPLY


class _Summarizer:
    async def send(self, *args: Any) -> _Answer:
        return _Answer()


@dataclass
class _Store:
    events: list[CompactionEvent] = field(default_factory=list)

    async def load(self, key: ThreadKey) -> ThreadState:
        return ThreadState(key, event=self.events[-1] if self.events else None)

    async def add_event(self, key: ThreadKey, written: CompactionEvent) -> CompactionEvent:
        self.events.append(replace(written, seq=len(self.events) + 1))
        return self.events[-1]

    async def lease_check(self, key: ThreadKey) -> None:
        return None


class _Log:
    def info(self, name: str, **fields: Any) -> None: ...
    def warning(self, name: str, **fields: Any) -> None: ...


def _private(node: Any, path: str = "") -> list[str]:
    """Where in `node` provider-private state sits."""
    if isinstance(node, list):
        return [p for k, e in enumerate(node) for p in _private(e, f"{path}[{k}]")]
    if not isinstance(node, dict):
        return []
    found = [f"{path}.{k}" for k in node if k in PRIVATE_KEYS]
    if node.get("type") in PRIVATE_TYPES or str(node.get("type", "")).startswith("reasoning."):
        found.append(f"{path} (type {node['type']})")
    return found + [p for k, v in node.items() for p in _private(v, f"{path}.{k}")]


def _visible(api: str, element: dict[str, Any]) -> dict[str, Any] | None:
    """What SPEC §7 keeps of a client element in a history file; None: nothing (an item that
    is reasoning state whole). A Responses item may lose its server `id` too (see the test)."""
    if api == "responses":
        return None if element.get("type") in ("reasoning", "compaction") else element
    if element.get("role") != "assistant":
        return element
    out = {k: v for k, v in element.items() if k not in PRIVATE_KEYS}
    content = out.get("content")
    if isinstance(content, list):
        parts = [p for p in content if not (isinstance(p, dict) and p.get("type") in PRIVATE_TYPES)]
        if len(parts) < len(content):
            out["content"] = parts or (None if out.get("tool_calls") else "")
    out = without_gemini_signature(out)
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [without_gemini_signature(c) for c in out["tool_calls"]]
    return out


def _job(api: str, elements: list[dict[str, Any]], strategy: str, keep: int,
         earlier: int | None) -> Job:
    entries = entries_of(api, elements)
    previous = None if earlier is None else Previous(earlier, "An earlier summary.")
    return Job(key=KEY, thread="thread", api=Api(api), model="m",
               upstream=SETTINGS.upstreams["fake"], credentials={}, entries=entries,
               ids=ids_of(entries), previous=previous,
               thresholds=Thresholds(trigger=10**8, limit=10**8, keep_tokens=None,
                                     keep_messages=keep, profiled=False),
               strategy=strategy, tokens_before=10**9,
               estimate=lambda projection: sum(measure(e) for e in projection),
               estimator=ESTIMATOR, client_doc={})


async def _compact(job: Job, history: HistoryFiles) -> CompactionEvent | None:
    compactor = Compactor(SETTINGS, _Summarizer(), _Store(), history, _Log(), None)  # type: ignore[arg-type]
    try:
        return await compactor.compact(job)
    except (NothingToCompact, CompactionFailed) as refused:
        event(f"no compaction: {type(refused).__name__}")
        return None


drawn = st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api), conversations(api, messy=True), st.sampled_from(("partial", "full")),
    st.integers(0, 6), st.none() | st.floats(0, 1)))


@given(drawn)
def test_history_lines_hold_the_summarized_messages_without_private_state(
        drawn: tuple[str, list, str, int, float | None]) -> None:
    api, elements, strategy, keep, where = drawn
    elements = [marked(e) for e in elements]
    lead = leading_instructions(entries_of(api, elements))
    # A checkpoint may have come before: only what lies after its cut is offloaded now.
    earlier = None if where is None else lead + int(where * (len(elements) - lead))
    job = _job(api, elements, strategy, keep, earlier)
    with tempfile.TemporaryDirectory() as tmp:
        history = HistoryFiles(Path(tmp) / "history")
        checkpoint = asyncio.run(_compact(job, history))
        path = history.path_for(KEY)
        data = path.read_bytes() if path.exists() else b""
    if checkpoint is None:
        assert data == b"", "a compaction that failed left history lines"
        return
    assert checkpoint.history_end == len(data) and checkpoint.history_file == str(path)

    text = data.decode()
    found = [s for s in SECRETS if s in text]
    assert not found, found
    lines = [orjson.loads(line) for line in data.splitlines()]
    records = [line["record"] for line in lines]
    event(f"{api}: {'some' if records else 'no'} lines")
    for record in records:
        assert not _private(record["message"]), _private(record["message"])

    start = lead if earlier is None else max(lead, earlier)
    wanted = [i for i in range(start, checkpoint.cutoff_index) if _visible(api, elements[i]) is not None]
    assert [r["index"] for r in records] == wanted, "each summarized message once, in order"
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    for record in records:
        i = record["index"]
        assert record["id"] == job.ids[i]
        want, got = _visible(api, elements[i]), record["message"]
        # A Responses item that followed dropped reasoning loses its server id (`fc_…`).
        assert got == want or (api == "responses" and got == {k: v for k, v in want.items()
                                                               if k != "id"}), (want, got)
