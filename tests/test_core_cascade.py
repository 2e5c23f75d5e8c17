"""The cascade as a whole: properties over generated conversations of both APIs."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entries, Kind, content_text, latest_user_index, leading_instructions
from proxy.core.cascade import STAGES, CascadeContext, CascadeResult, Stage, run_cascade
from proxy.core.exploration import HEADER
from proxy.core.repair import CANCELLED_TEXT, INTERRUPTED_NOTE, MOVED_NOTE, repair
from proxy.core.sanitize import Policy
from proxy.settings import CollapseSettings, CompactionSettings, MicrocompactSettings, TruncateSettings
from proxy.testing.rules import check_chat, check_responses
from tests.factories import entries_of, measure, stage_context, wire
from tests.strategies import cascade_contexts, conversations, request_points

RECORD_OPENING = HEADER.split("{")[0]
apis = st.sampled_from(("chat", "responses"))


@st.composite
def cases(draw: st.DrawFn, messy: bool | None = None) -> tuple[str, list, CascadeContext]:
    api = draw(apis)
    elements = draw(conversations(api, messy=draw(st.booleans()) if messy is None else messy))
    return api, elements, draw(contexts(len(elements)))


contexts = cascade_contexts  # the existing draw: compaction flags off


def _run(api: str, elements: list, context: CascadeContext) -> tuple[Entries, CascadeResult]:
    entries = entries_of(api, elements)
    return entries, run_cascade(entries, context)


def _valid(api: str, body: list) -> bool:
    return (check_chat({"messages": body}) if api == "chat" else check_responses({"input": body})) is None


@given(cases())
def test_projection_is_valid_for_the_upstream(case: tuple) -> None:
    api, elements, context = case
    _, result = _run(api, elements, context)
    assert _valid(api, wire(result.entries))


@given(cases())
def test_the_proxy_never_invents_a_success(case: tuple) -> None:
    api, elements, context = case
    _, result = _run(api, elements, context)
    for entry, origin in zip(result.entries, result.origins, strict=True):
        if origin is None:
            text = content_text(entry)
            # A cancelled result of either chat form: a legacy call's is a `function` message.
            assert ((entry.kind is Kind.RESULT or entry.role == "function") and text == CANCELLED_TEXT) or \
                   (entry.kind is Kind.ASSISTANT and text.startswith(RECORD_OPENING)) or \
                   (entry.kind is Kind.ASSISTANT and text in (INTERRUPTED_NOTE, MOVED_NOTE))
            assert "succe" not in text.split("\n")[0].lower()


@given(cases(messy=False))
def test_lead_latest_user_and_window_are_the_clients_bytes(case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, replace(context, policy=Policy.TRANSPARENT))
    lead = leading_instructions(entries)
    assert [e.to_bytes() for e in result.entries[:lead]] == [e.to_bytes() for e in entries[:lead]]
    latest, kept = latest_user_index(entries), latest_user_index(result.entries)
    if latest is not None:
        assert kept is not None and result.entries[kept].to_bytes() == entries[latest].to_bytes()
    tail = len(result.entries) - result.window_start
    assert [e.to_bytes() for e in result.entries[result.window_start:]] == \
           [e.to_bytes() for e in entries[len(entries) - tail:]]


@given(cases(messy=True))
def test_window_of_a_damaged_conversation_is_client_bytes_or_cancellations(case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, replace(context, policy=Policy.TRANSPARENT))
    for entry, origin in list(zip(result.entries, result.origins, strict=True))[result.window_start:]:
        if origin is None:
            assert content_text(entry) in (CANCELLED_TEXT, INTERRUPTED_NOTE, MOVED_NOTE)
        else:
            client = {k: v for k, v in entries[origin].raw.items() if k != "id"}
            assert entry is entries[origin] or {k: v for k, v in entry.raw.items() if k != "id"} == client


@given(cases())
def test_unchanged_entries_are_the_clients_own_objects(case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, context)
    for entry, origin in zip(result.entries, result.origins, strict=True):
        if origin is not None and entry.to_bytes() == entries[origin].to_bytes():
            assert entry is entries[origin]


@given(cases())
def test_truncated_arguments_still_parse_as_json(case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, context)
    for entry, origin in zip(result.entries, result.origins, strict=True):
        if origin is None or entry is entries[origin]:
            continue
        for new, old in zip(entry.calls, entries[origin].calls, strict=True):
            if not old.custom and _parses(old.arguments):
                assert _parses(new.arguments)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@given(cases())
def test_running_the_cascade_twice_is_running_it_once(case: tuple) -> None:
    api, elements, context = case
    # A window measured in tokens (or stepped by tokens) moves as the list shrinks, and one
    # counted in messages moves when the sanitizer drops items inside it; twice = once holds
    # for a fixed window: messages, with the sanitizer held (it has its own property).
    context = replace(context, keep_tokens=None, window_step=None, policy=Policy.TRANSPARENT,
                      keep_messages=6 if context.keep_messages is None else context.keep_messages)
    _, once = _run(api, elements, context)
    # A mark counts in the client's list; the output is another list, so it goes without.
    twice = run_cascade(once.entries, replace(context, mark=None))
    assert [e.to_bytes() for e in twice.entries] == [e.to_bytes() for e in once.entries]


@given(cases(), st.sampled_from(STAGES[1:]), st.data())
def test_each_stage_applied_twice_is_applied_once(case: tuple, stage: Stage, data: st.DataObject) -> None:
    api, elements, context = case
    repaired = repair(entries_of(api, elements)).entries
    tail = data.draw(st.integers(0, len(repaired)))
    first = stage.run(repaired, stage_context(repaired, tail, settings=context.settings,
                                              now=context.now, last_activity=0.0))
    again = stage.run(first.entries, stage_context(first.entries, tail, settings=context.settings,
                                                   now=context.now, last_activity=0.0,
                                                   origins=first.origins))
    assert again.entries is first.entries


@given(cases())
def test_reported_savings_add_up_to_the_difference(case: tuple) -> None:
    api, elements, context = case
    entries, result = _run(api, elements, context)
    total = sum(map(measure, entries)) - sum(map(measure, result.entries))
    assert result.tokens_saved == total
    assert result.changed == (result.entries is not entries and any(r.changed for r in result.reports))


def _monotone(old: CascadeResult, new: CascadeResult) -> None:
    """The new projection starts with the old one up to the first message that newly left the
    window; when nothing left it, the old projection is a prefix of the new one."""
    old_bytes = [e.to_bytes() for e in old.entries]
    new_bytes = [e.to_bytes() for e in new.entries]
    if _window_origin(new) <= _window_origin(old):
        assert new_bytes[:len(old_bytes)] == old_bytes
    else:
        assert new_bytes[:old.window_start] == old_bytes[:old.window_start]


def _window_origin(result: CascadeResult) -> int:
    origins = [o for o in result.origins[result.window_start:] if o is not None]
    return origins[0] if origins else 10**9


@st.composite
def growing(draw: st.DrawFn) -> tuple[str, list, list[int], CascadeContext]:
    api = draw(apis)
    elements = draw(conversations(api, max_turns=5))
    points = request_points(elements)
    context = draw(contexts(len(elements)))
    return api, elements, points, replace(context, now=0.0, mark=None)


@given(growing())
def test_stages_are_monotone_as_the_conversation_grows(case: tuple) -> None:
    api, elements, points, context = case
    context = replace(context, policy=Policy.TRANSPARENT)
    results = [_run(api, elements[:p], context)[1] for p in points]
    for old, new in pairwise(results):
        _monotone(old, new)


@given(growing(), st.data())
def test_sticky_microcompact_stays_monotone_after_an_idle_request(case: tuple, data: st.DataObject) -> None:
    api, elements, points, context = case
    idle_at = data.draw(st.integers(0, max(len(points) - 1, 0)))
    results = []
    mark = None
    for k, p in enumerate(points):
        now = 1e9 if k == idle_at else 0.0
        result = _run(api, elements[:p], replace(context, policy=Policy.TRANSPARENT, now=now, mark=mark))[1]
        mark = result.mark
        results.append(result)
    for old, new in pairwise(results[idle_at:]):
        _monotone(old, new)


@given(growing())
def test_whole_projection_is_monotone_inside_a_tool_loop(case: tuple) -> None:
    api, elements, points, context = case
    runs = [(p, _run(api, elements[:p], context)[1]) for p in points]
    for (p1, old), (p2, new) in pairwise(runs):
        same_turn = latest_user_index(entries_of(api, elements[:p1])) == \
            latest_user_index(entries_of(api, elements[:p2]))
        if same_turn and old.sanitized.policy is new.sanitized.policy:
            _monotone(old, new)


def test_stage_order_is_one_tuple() -> None:
    assert [s.name for s in STAGES] == ["repair", "collapse", "truncate", "microcompact"]


def test_each_cheap_stage_can_be_switched_off() -> None:
    settings = CompactionSettings(collapse=CollapseSettings(enabled=False),
                                  truncate=TruncateSettings(enabled=False),
                                  microcompact=MicrocompactSettings(enabled=False))
    entries = entries_of("chat", [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "none"}])
    result = run_cascade(entries, CascadeContext(settings, measure=measure))
    assert [r.name for r in result.reports] == ["repair", "sanitize"]
    assert result.entries == entries and not result.changed and result.window_start == 0


def test_a_plain_chat_skips_the_stages_and_comes_out_as_it_went_in() -> None:
    entries = entries_of("chat", [{"role": "system", "content": "be brief"},
                                  {"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": "hello"},
                                  {"role": "user", "content": "again"}])
    result = run_cascade(entries, CascadeContext(CompactionSettings(), measure=measure))
    assert result.reports == () and not result.changed
    assert all(a is b for a, b in zip(result.entries, entries, strict=True))
    forced = run_cascade(entries, CascadeContext(CompactionSettings(), measure=measure,
                                                 compacted=True))
    assert [r.name for r in forced.reports][-1] == "sanitize"


def _session_case() -> tuple[Entries, Any]:
    from proxy.testing.sessions import coding_session
    return entries_of("chat", coding_session(120, seed=3)), CompactionSettings()


def test_a_realistic_session_shrinks_outside_the_window_only() -> None:
    entries, settings = _session_case()
    result = run_cascade(entries, CascadeContext(settings, measure=measure, keep_tokens=4000,
                                                 now=1e9, last_activity=0.0))
    saved = {r.name: r.tokens_saved for r in result.reports}
    assert saved["collapse"] > 0 and saved["truncate"] > 0 and saved["microcompact"] > 0
    tail = len(result.entries) - result.window_start
    assert result.entries[result.window_start:] == entries[len(entries) - tail:]
    assert check_chat({"messages": wire(result.entries)}) is None


def test_summary_is_plain_data_for_the_log_line() -> None:
    entries, settings = _session_case()
    result = run_cascade(entries, CascadeContext(settings, measure=measure, keep_messages=6))
    summary = result.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["stages"]["collapse"]["tokens_saved"] > 0 and summary["policy"] == "cheap"
