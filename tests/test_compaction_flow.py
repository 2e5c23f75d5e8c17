"""The pure stages driven the way the server drives them, with a scripted summarizer."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import orjson

from proxy.compaction import apply, manual, postcheck, restore, summarizer, trigger
from proxy.compaction.cutoff import Previous, choose_cutoff
from proxy.compaction.summary_reply import SummaryReply, read_reply
from proxy.conversation import Api, Entries, serialize
from proxy.records import CompactionEvent
from proxy.settings import CompactionSettings, ModelProfile
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, estimate,
                                           ids_of, measure, system, tool_result, user)

SETTINGS = CompactionSettings()
PROFILE = ModelProfile("m", max_input_tokens=6000)
NOW = datetime(2026, 8, 21, 9, 30, tzinfo=ZoneInfo("Asia/Shanghai"))


def fake_summarizer(body: dict) -> bytes:
    """Keeps every FACT line it is shown, as a faithful summarizer would."""
    text = "\n".join(m["content"] for m in body["messages"])
    facts = sorted(set(re.findall(r"FACT: [^\n\"]+", text)))
    return orjson.dumps({"choices": [{"message": {"role": "assistant",
                                                  "content": "\n".join(facts) or "nothing"},
                                      "finish_reason": "stop"}]})


def compact(entries: Entries, event: CompactionEvent | None,
            strategy: str = "partial", focus: str | None = None):
    """One auto/manual compaction as the server does it; returns (event, projection)."""
    ids = ids_of(entries)
    rebuilt = apply.rebuild(entries, ids, event) if event else None
    th = trigger.thresholds(SETTINGS, PROFILE)
    before = estimate(rebuilt.projection if rebuilt else entries)
    cutoff = choose_cutoff(entries, [measure(e) for e in entries], th, strategy,
                           rebuilt.previous if rebuilt else None)
    if cutoff is None:
        return None
    restored = restore.collect(entries, cutoff, SETTINGS.restore, count)
    plan = summarizer.plan_summary(entries, cutoff, api=Api.CHAT, model="m", now=NOW,
                                   settings=SETTINGS.summarizer, window=3000, count=count,
                                   measure=measure, focus=focus)
    summary = plan.previous_summary
    for step in range(plan.steps):
        reply = read_reply(Api.CHAT, fake_summarizer(plan.request(step, summary)))
        assert postcheck.check_reply(reply).ok
        summary = reply.text
    done = apply.finish(entries, ids, cutoff, summary, restored, estimate=estimate,
                        measure=measure, trigger=th.trigger, limit=th.limit, tokens_before=before,
                        strategy=strategy, created_at=1.0, model="m", summarizer_model="m")
    assert done.verdict.ok, done.verdict
    return done.event, done.projection


def turns(start: int, stop: int) -> list:
    out = []
    for i in range(start, stop):
        out += [user(f"task {i}" + (f" FACT: planted {i}" if i % 10 == 0 else "")),
                assistant_calls((f"c{i}", "read_file", {"path": f"src/m{i}.py"})),
                tool_result(f"c{i}", f"module {i}\n" + "line of code\n" * 40),
                assistant(f"done {i}")]
    return out


def test_facts_survive_recompaction_and_the_tail_stays_byte_identical() -> None:
    elements = [system()] + turns(0, 30)
    entries = conv(Api.CHAT, elements)
    event, projection = compact(entries, None)
    assert estimate(projection) <= trigger.thresholds(SETTINGS, PROFILE).trigger
    tail = entries[event.cutoff_index:]
    assert serialize(projection).endswith(serialize(tail)[1:])

    elements += turns(30, 60)
    grown = conv(Api.CHAT, elements)
    assert apply.rebuild(grown, ids_of(grown), event) is not None
    second, projection2 = compact(grown, event)
    assert second.cutoff_index > event.cutoff_index
    summary = apply.summary_body(second)
    assert all(f"FACT: planted {i}" in summary for i in (0, 10, 20, 30, 40))


def test_event_decides_hysteresis_for_the_next_request() -> None:
    entries = conv(Api.CHAT, [system()] + turns(0, 30))
    event, projection = compact(entries, None)
    th = trigger.thresholds(SETTINGS, PROFILE)
    assert trigger.decide(event.tokens_after, th, event, SETTINGS.rearm_ratio).action \
        is trigger.Action.NONE


def test_manual_compact_then_nothing_new() -> None:
    elements = [system()] + turns(0, 6) + [user("/compact keep FACT lines")]
    raw = conv(Api.CHAT, elements)
    command = manual.detect(raw, SETTINGS.manual_command)
    assert command is not None and command.focus == "keep FACT lines"
    entries, _ = manual.strip_exchanges(raw, ids_of(raw), SETTINGS.manual_command)
    event, _ = compact(entries, None, focus=command.focus)
    answer = manual.compacted_text(event.cutoff_index - 1, len(entries) - event.cutoff_index,
                                   event.tokens_before, event.tokens_after)

    again = conv(Api.CHAT, [*elements, assistant(answer), user("/compact")])
    assert manual.detect(again, SETTINGS.manual_command) is not None
    stripped, _ = manual.strip_exchanges(again, ids_of(again), SETTINGS.manual_command)
    assert [e.raw for e in stripped] == [e.raw for e in entries]
    assert compact(stripped, event) is None  # nothing new: say so


def test_summary_cut_short_is_a_failure() -> None:
    reply = read_reply(Api.CHAT, {"choices": [{"message": {"content": "half"},
                                               "finish_reason": "length"}]})
    assert postcheck.check_reply(reply, 4096) == postcheck.Verdict(
        False, "summary", "the summary was cut short at its output limit (finish_reason: "
        "length): compaction.summarizer.max_output_tokens (4,096 tokens) is too small for it "
        "(a reasoning model's reasoning counts against it); raise it, or use a summarizer "
        "that writes shorter summaries")
    assert not postcheck.check_reply(SummaryReply("", "stop")).ok


def test_previous_is_what_rebuild_carries_forward() -> None:
    entries = conv(Api.CHAT, [system()] + turns(0, 30))
    event, _ = compact(entries, None)
    rebuilt = apply.rebuild(entries, ids_of(entries), event)
    assert rebuilt.previous == Previous(event.cutoff_index, apply.summary_body(event))
