"""The proxy never sends a tool message whose content a provider refuses (PROTOCOL.md §1.1).

A client's tool results may be text-part arrays; compaction (summary, restored files), the
cheap stages (truncation, microcompact clearing, collapse) and the retry placeholders rebuild
or replace tool messages. Every request the fake upstream received must pass its content rule,
which the fake enforces with a 400 the replay would see.
"""

from __future__ import annotations

from typing import Any

from proxy.server.services import SERVICES
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, planted_session, replay
from tests.session_rig import Clock

MODELS = {"small-*": {"max_input_tokens": LIMIT}}


def _as_text_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The session with every tool result sent as two text parts, as some agents do."""
    out = []
    for message in messages:
        content = message.get("content")
        if message["role"] == "tool" and isinstance(content, str):
            half = len(content) // 2
            message = {**message, "content": [{"type": "text", "text": content[:half]},
                                              {"type": "text", "text": content[half:]}]}
        out.append(message)
    return out


def _tool_contents(body: dict[str, Any]) -> list[Any]:
    return [m.get("content") for m in body.get("messages", []) if m.get("role") == "tool"]


def _valid(content: Any) -> bool:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content)


def test_compacting_a_session_of_text_part_results_sends_only_valid_tool_messages(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    pipeline = proxy.app[SERVICES].pipeline
    clock = pipeline.clock = pipeline.compactor.clock = Clock()

    def idle_between_turns(_: int) -> bool:
        clock.now += 7 * 3600  # past `idle_seconds`: microcompact clears old results
        return False

    messages, _ = planted_session(240, seed=11)
    run = replay(proxy.base_url, fake, _as_text_parts(messages), "text-parts",
                 stop=idle_between_turns)
    assert set(run.statuses) == {200}
    assert proxy.logs.events("compaction_completed"), "the session must be compacted"
    main = [r.json for r in fake.requests
            if r.path.endswith("/chat/completions") and not is_summarizer_request(r.json)]
    contents = [c for body in main for c in _tool_contents(body)]
    assert any(isinstance(c, list) for c in contents), "the client's parts reach upstream"
    assert all(_valid(c) for c in contents)
    stages = {name for line in proxy.requests() for name in line.get("stages", {})}
    assert {"microcompact", "collapse", "truncate"} <= stages
