"""A LiteLLM-fronted agent (OpenHands, Cline) through compaction, request by request.

The shape (`client_shapes.litellm_session`): part-list content with Anthropic `cache_control`
markers that move to the newest user messages and tool results every turn, `name` on messages,
assistant `content: null` beside `tool_calls` with `reasoning_content`, signed `thinking_blocks`
and `provider_specific_fields`. Every upstream request must pass the provider's rules, keep the
leading system message and the latest user message as sent, and leave what it kept of the
client's messages as the client wrote it (SPEC §4, §5, §11)."""

from __future__ import annotations

from collections import Counter

import orjson

from proxy.testing.summarizer import FakeSummarizer
from tests.client_shapes import RESTORED, chat_anomalies, litellm_session, replay, with_moving_markers
from tests.session_rig import Upstream

LIMIT = 16_000


def _markers(messages: list[dict]) -> list[dict]:
    return with_moving_markers(with_moving_markers(messages), ("tool",))


def _problems(run, dialect: str = "openai") -> Counter[str]:
    found: Counter[str] = Counter()
    for sent, received in zip(run.sent, run.upstream, strict=True):
        found.update(p for p in chat_anomalies(sent, received, dialect) if p != RESTORED)
    return found


def test_a_litellm_shaped_session_compacts_and_keeps_the_clients_bytes(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})

    run = replay(proxy.base_url, fake, litellm_session(240), "litellm", shape=_markers)

    assert len(proxy.logs.events("compaction_completed")) >= 5
    assert _problems(run) == Counter()
    lines = proxy.requests()
    assert sum(1 for line in lines if line["anchor_used"]) > len(lines) // 2
    # Kept tool results still carry the markers the client put on them.
    last = orjson.loads(run.upstream[-1])["messages"]
    marked = [m for m in last if m["role"] == "tool" and isinstance(m["content"], list)
              and m["content"][-1].get("cache_control") == {"type": "ephemeral"}]
    assert marked


def test_idle_clearing_and_collapse_keep_the_shape_of_what_they_do_not_clear(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}},
                       compaction={"microcompact": {"idle_seconds": 0, "keep_recent": 2}})

    run = replay(proxy.base_url, fake, litellm_session(200), "idle", shape=_markers)

    stages = Counter(name for line in proxy.requests() for name in line.get("stages") or ())
    assert stages["microcompact"] and stages["collapse"]
    assert _problems(run) == Counter()


def test_a_thinking_provider_gets_reasoning_on_every_earlier_tool_turn(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT}, dialect="deepseek-thinking")
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})

    run = replay(proxy.base_url, fake, litellm_session(200), "thinking", shape=_markers)

    assert proxy.logs.events("compaction_completed")
    assert not [line for line in proxy.requests() if line.get("retried")]
    assert _problems(run, "deepseek-thinking") == Counter()


def _counted_more(loop_thread, make_proxy, shape) -> tuple[int, int, int]:
    """Compactions, anchored requests and requests over the trigger by upstream's own count,
    against an upstream whose tokenizer counts a quarter more than the proxy's (Claude's, say)."""
    fake = Upstream(True, limits={"small-*": LIMIT})
    loop_thread.run(fake.start())
    try:
        FakeSummarizer.install(fake)
        proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
        replay(proxy.base_url, fake, litellm_session(240), "counted", shape=shape)
        lines = proxy.requests()
        return (len(proxy.logs.events("compaction_completed")),
                sum(1 for line in lines if line["anchor_used"]),
                sum(1 for line in lines if line.get("usage_input", 0) > LIMIT * 3 // 4))
    finally:
        loop_thread.run(fake.stop())


def test_markers_moved_every_turn_do_not_hide_upstreams_count(loop_thread, make_proxy) -> None:
    # Before anchors looked past the markers: 7 compactions, 18 anchored, 31 requests over
    # the trigger with moving markers, against 12, 65 and 8 with markers that stay put.
    moving = _counted_more(loop_thread, make_proxy, _markers)
    assert moving == _counted_more(loop_thread, make_proxy, list)
    assert moving[2] <= 10


def _with_freeform_patches(messages: list[dict]) -> list[dict]:
    """Edits as calls of a freeform `custom` tool (OpenAI chat's `type: "custom"` calls)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m["role"] == "assistant" and calls:
            calls = [{"id": c["id"], "type": "custom", "custom": {
                "name": "apply_patch", "input": f"*** Begin Patch\n{c['function']['arguments']}\n*** End Patch"}}
                if c["function"]["name"] in ("edit_file", "write_file") else c for c in calls]
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


def test_freeform_calls_keep_their_own_shape_when_cut_and_compacted(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})

    run = replay(proxy.base_url, fake, _with_freeform_patches(litellm_session(240)), "freeform",
                 shape=_markers)

    assert len(proxy.logs.events("compaction_completed")) >= 3
    assert _problems(run) == Counter()
    cut = 0
    for sent, received in zip(run.sent, run.upstream, strict=True):
        theirs = {c["id"]: c for m in orjson.loads(sent)["messages"] for c in m.get("tool_calls") or ()}
        for message in orjson.loads(received)["messages"]:
            for c in message.get("tool_calls") or ():
                if c["type"] == "custom" and c != theirs[c["id"]]:
                    assert set(c) == {"id", "type", "custom"} and set(c["custom"]) == {"name", "input"}
                    assert c["custom"]["input"].startswith("*** Begin Patch") and "chars cut" in c["custom"]["input"]
                    cut += 1
    assert cut, "old patches were cut by the truncate stage"
