"""The cascade's per-entry reads made in C (`map`, `compress`, memo reads) say what the loops
they replaced said: each loop is kept here as the oracle, run on the same drawn lists (with
repeated call ids, late and stray answers, and made entries mixed in)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api, Entries, Entry, Kind, with_result_text
from proxy.core import sanitize
from proxy.core.boundary import _open_call_spans
from proxy.core.kinds import CHAT, RESULT
from proxy.core.microcompact import CLEARED_TEXT, microcompact
from proxy.core.private import Rule, Tally, chain_bound_item, strippable
from proxy.core.repair import CANCELLED_TEXT
from proxy.core.truncate import truncate
from proxy.core.window import Window, _start_for_tokens, window_of
from proxy.records import MicrocompactMark
from proxy.settings import CompactionSettings, MicrocompactSettings, TruncateSettings
from tests.factories import entries_of, stage_context
from tests.strategies import conversations, interrupted


def _stray(api: str, ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    some_id = st.sampled_from([*ids, "call_orphan"])
    if api == "chat":
        return st.one_of(
            some_id.map(lambda i: {"role": "tool", "tool_call_id": i, "content": "late"}),
            some_id.map(lambda i: {"role": "tool", "tool_call_id": i, "content": CANCELLED_TEXT}),
            some_id.map(lambda i: {"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "grep", "arguments": "{}"}}]}))
    return st.one_of(
        some_id.map(lambda i: {"type": "function_call_output", "call_id": i, "output": "late"}),
        some_id.map(lambda i: {"type": "function_call", "call_id": i, "name": "grep", "arguments": "{}"}),
        st.just({"type": "compaction", "encrypted_content": "gAAAAABc"}),
        st.just({"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "gAAAAABr"}))


@st.composite
def _lists(draw: st.DrawFn) -> tuple[str, Entries]:
    api = draw(st.sampled_from(("chat", "responses")))
    elements = draw(conversations(api) | conversations(api, messy=True) | interrupted(api))
    ids = [c["id"] for e in elements for c in e.get("tool_calls") or ()]
    ids += [e["call_id"] for e in elements if isinstance(e.get("call_id"), str)]
    for _ in range(draw(st.integers(0, 4))):
        elements.insert(draw(st.integers(0, len(elements))), draw(_stray(api, ids)))
    entries = entries_of(api, elements)
    if entries and draw(st.booleans()):  # a made entry: no client bytes, no key
        i = draw(st.integers(0, len(entries) - 1))
        if entries[i].kind is RESULT:
            entries = (*entries[:i], with_result_text(entries[i], "made"), *entries[i + 1:])
    return api, entries


# ---------------------------------------------------------------- the oracles

def _open_call_spans_one_by_one(entries: Entries) -> list[int]:
    spans = [0] * (len(entries) + 1)
    latest_call: dict[str, int] = {}
    for i, entry in enumerate(entries):
        for call in entry.calls:
            latest_call[call.id] = i
        if entry.kind is RESULT and entry.answers in latest_call:
            for b in range(latest_call[entry.answers] + 1, i + 1):
                spans[b] += 1
    return spans


def _start_for_tokens_one_by_one(sizes: list[int], keep_tokens: int, lead: int) -> int:
    start = len(sizes)
    total = 0
    while start > lead and (total + sizes[start - 1] <= keep_tokens or start == len(sizes)):
        start -= 1
        total += sizes[start]
    return start


def _compactable_one_by_one(entries: Entries, globs: tuple[str, ...]) -> list[int]:
    from fnmatch import fnmatchcase
    # A result goes by the latest call with its id before it (ids may come back later).
    matched: dict[str, bool] = {}
    unknown = any(g == "*" or fnmatchcase("", g) for g in globs)
    found = []
    for i, e in enumerate(entries):
        for c in e.calls:
            matched[c.id] = any(g == "*" or fnmatchcase(c.name, g) for g in globs)
        if (e.kind is RESULT and matched.get(e.answers or "", unknown)
                and e.raw.get("content" if e.api is CHAT else "output") != CANCELLED_TEXT):
            found.append(i)
        elif e.api is CHAT and e.role == "function" and e.raw.get("content") != CANCELLED_TEXT:
            # The deprecated result names its function itself.
            name = e.raw.get("name") if isinstance(e.raw.get("name"), str) else ""
            if any(g == "*" or fnmatchcase(name, g) for g in globs):
                found.append(i)
    return found


def _legacy_call(e: Entry) -> bool:
    """A deprecated `function_call` (its arguments a string): a call truncate cuts too."""
    call = e.raw.get("function_call") if e.api is CHAT and e.kind is Kind.ASSISTANT else None
    return isinstance(call, dict) and isinstance(call.get("arguments"), str)


# ---------------------------------------------------------------- the properties

@given(_lists())
def test_open_call_spans_are_counted_as_the_loop_counts_them(drawn: tuple[str, Entries]) -> None:
    _, entries = drawn
    assert _open_call_spans(entries) == _open_call_spans_one_by_one(entries)


@given(st.lists(st.integers(-50, 500), max_size=40), st.integers(-10, 3000), st.integers(0, 45))
def test_the_window_start_by_tokens_is_the_loops(sizes: list[int], keep: int, lead: int) -> None:
    assert _start_for_tokens(sizes, keep, lead) == _start_for_tokens_one_by_one(sizes, keep, lead)


_GLOBS = st.sampled_from((("*",), ("read_*", "grep"), ("bash",), ("",), ()))


@given(_lists(), _GLOBS, st.integers(0, 12), st.integers(0, 4), st.booleans(), st.data())
def test_microcompact_clears_what_the_loops_clear(drawn: tuple[str, Entries], globs: tuple[str, ...],
                                                  tail: int, keep: int, idle: bool,
                                                  data: st.DataObject) -> None:
    _, entries = drawn
    settings = CompactionSettings(microcompact=MicrocompactSettings(tools=globs, keep_recent=keep))
    mark = data.draw(st.none() | st.integers(0, max(len(entries) - 1, 0)).map(
        lambda i: MicrocompactMark(None, i)))
    ctx = stage_context(entries, tail, settings=settings, mark=mark, now=1e9 if idle else 1.0,
                        last_activity=0.0)
    compactable = _compactable_one_by_one(entries, globs)
    reach = None if mark is None else mark.through_index
    old = [i for i in compactable if ctx.window.touchable(i)]
    targets = {i for i in old if reach is not None and (ctx.origins[i] or 0) <= reach}
    if idle:
        recent = set(compactable[-keep:]) if keep > 0 else set()
        targets.update(i for i in old if i not in recent)
    expected = [i for i in sorted(targets)
                if entries[i].raw.get("content" if entries[i].api is CHAT else "output") != CLEARED_TEXT
                and ctx.measure(with_result_text(entries[i], CLEARED_TEXT)) < ctx.measure(entries[i])]
    for _ in range(2):  # the second time from the entries' memos
        out = microcompact(entries, ctx)
        changed = [i for i, (a, b) in enumerate(zip(entries, out.entries, strict=True)) if a is not b]
        assert changed == expected
        assert all(out.entries[i].to_bytes() == with_result_text(entries[i], CLEARED_TEXT).to_bytes()
                   for i in changed)


@given(_lists(), st.integers(0, 12), st.sampled_from((20, 200)))
def test_truncate_cuts_the_calls_the_loop_visits(drawn: tuple[str, Entries], tail: int,
                                                 limit: int) -> None:
    _, entries = drawn
    settings = CompactionSettings(truncate=TruncateSettings(max_arg_chars=limit, keep_chars=5))
    ctx = stage_context(entries, tail, settings=settings)
    visited = [i for i in ctx.window.outside if (entries[i].calls or _legacy_call(entries[i]))
               and ctx.window.touchable(i)]
    out = truncate(entries, ctx)
    changed = [i for i, (a, b) in enumerate(zip(entries, out.entries, strict=True)) if a is not b]
    assert set(changed) <= set(visited)
    assert out.entries == truncate(entries, ctx).entries


@given(_lists(), st.integers(0, 40))
def test_the_sanitizer_visits_the_entries_the_loops_visited(drawn: tuple[str, Entries],
                                                            past: int) -> None:
    _, entries = drawn
    everything = Rule(blobs=True, plain=True)
    expected_stripped = [i for i, e in enumerate(entries)
                         if e.kind is Kind.ASSISTANT and e.api is Api.CHAT and strippable(e)]
    stripped = sanitize._stripped(entries, past, (everything, everything), everything, Tally())
    assert [i for i, (a, b) in enumerate(zip(entries, stripped, strict=True)) if a is not b] == \
        [i for i in expected_stripped if _strips(entries[i])]
    for policy in sanitize.Policy:
        for changed_at in (None, 0, past):
            for rule in (everything, Rule(blobs=False, plain=False), Rule(blobs=False, plain=True)):
                found, expected = Tally(), Tally()
                assert (sanitize._doomed_items(entries, past, rule, policy, changed_at, found)
                        == _doomed_one_by_one(entries, past, rule, policy, changed_at, expected))
                assert (found.blobs, found.plain) == (expected.blobs, expected.plain)


def _doomed_one_by_one(entries: Entries, past: int, loop_rule: Rule, policy: sanitize.Policy,
                      changed_at: int | None, tally: Tally) -> set[int]:
    from proxy.core.private import item_kind
    doomed: set[int] = set()
    for i, entry in enumerate(entries):
        bound = entry.api is Api.RESPONSES and chain_bound_item(entry)
        if not bound and entry.kind is not Kind.REASONING:
            continue
        compaction = bound and entry.kind is not Kind.REASONING
        cheap = policy is sanitize.Policy.CHEAP
        past_rule = loop_rule if compaction and cheap else Rule(blobs=True, plain=True)
        rule = past_rule if i < past else loop_rule
        chain_broken = cheap and bound and changed_at is not None and i >= changed_at
        if rule.blobs or (rule.plain and not bound) or chain_broken:
            doomed.add(i)
            (tally.blobs if bound else tally.plain)[item_kind(entry)] += 1
            if compaction and (changed_at is None or i < changed_at):
                changed_at = i
    return doomed


def _strips(entry: Entry) -> bool:
    from proxy.core.private import strip_message
    return strip_message(entry, Rule(blobs=True, plain=True), Tally()) is not entry


def test_window_touchable_among_is_touchable() -> None:
    window = Window(2, 9, 5)
    assert window.touchable_among([0, 2, 3, 5, 8, 9, 12]) == [i for i in (0, 2, 3, 5, 8, 9, 12)
                                                              if window.touchable(i)]
    assert window_of(entries_of("chat", []), 0).touchable_among([]) == []
