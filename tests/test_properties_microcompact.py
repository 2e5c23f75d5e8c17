"""Microcompact as SPEC §4.3 states it, over conversations of both APIs in every client shape.

"When the thread was idle longer than `idle_seconds`, the content of old compactable tool
results becomes a clear marker (`[Old tool result content cleared]`), except the most recent
`keep_recent`", and every stage "only touches messages outside the protected recent window".
Written here from that alone: a result's tool is the one its call names (the latest call with
its id before it; a legacy `function` result names it itself); the most recent `keep_recent`
compactable results are counted over the whole list. Without idle time (and no stored mark)
nothing changes; with it, only old compactable results change, only their content, only to the
marker, and a long one always does.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entries, Kind, content_text
from proxy.core.microcompact import CLEARED_TEXT, microcompact
from proxy.core.repair import CANCELLED_TEXT
from proxy.settings import CompactionSettings, MicrocompactSettings
from tests.factories import entries_of, stage_context
from tests.strategies_more import richer

IDLE_SECONDS = 3600.0


def _tool_names(entries: Entries) -> list[str | None]:
    """For each entry that is a result, the name of the tool it answers (None: not a result)."""
    names: dict[str, str] = {}
    out: list[str | None] = []
    for entry in entries:
        for call in entry.calls:
            names[call.id] = call.name
        if entry.kind is Kind.RESULT:
            out.append(names.get(entry.answers or "", ""))
        elif entry.raw.get("role") == "function":
            out.append(str(entry.raw.get("name") or ""))
        else:
            out.append(None)
    return out


def _output(raw: dict[str, Any]) -> str:
    return "content" if "role" in raw else "output"


@given(st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(st.just(api), richer(api, messy=True))),
       st.data())
def test_only_old_compactable_results_are_cleared_and_only_when_idle(drawn: tuple, data: st.DataObject) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    globs = data.draw(st.sampled_from((("*",), ("read_file", "grep"), ("read_*",), ("bash", "apply_patch"))), "tools")
    keep = data.draw(st.integers(0, 6), "keep_recent")
    tail = data.draw(st.integers(0, len(entries)), "tail")
    idle = data.draw(st.booleans(), "idle")
    settings = CompactionSettings(microcompact=MicrocompactSettings(idle_seconds=IDLE_SECONDS,
                                                                    keep_recent=keep, tools=globs))
    now = 10 * IDLE_SECONDS
    ctx = stage_context(entries, tail=tail, settings=settings, now=now,
                        last_activity=0.0 if idle else now - IDLE_SECONDS / 2)
    out = microcompact(entries, ctx).entries
    assert len(out) == len(entries)
    if not idle:
        assert all(a is b for a, b in zip(out, entries, strict=True))
        return
    names = _tool_names(entries)
    compactable = [i for i, name in enumerate(names) if name is not None
                   and any(fnmatchcase(name, g) for g in globs) and content_text(entries[i]) != CANCELLED_TEXT]
    recent = set(compactable[-keep:]) if keep else set()
    old = [i for i in compactable if i not in recent and ctx.window.touchable(i)]
    for i, (new, client) in enumerate(zip(out, entries, strict=True)):
        if new is client or new.to_bytes() == client.to_bytes():
            continue
        assert i in old, (i, names[i], i in recent, ctx.window.touchable(i))
        key = _output(client.raw)
        assert new.raw[key] == CLEARED_TEXT
        assert {k: v for k, v in new.raw.items() if k != key} == {k: v for k, v in client.raw.items() if k != key}
    for i in old:
        if len(content_text(entries[i])) > 200:
            assert content_text(out[i]) == CLEARED_TEXT, i
