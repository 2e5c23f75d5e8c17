"""Microcompact: after a long idle time old results are cleared, and they stay cleared."""

from __future__ import annotations

from proxy.conversation import content_text
from proxy.core.microcompact import CLEARED_TEXT, microcompact
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.records import MicrocompactMark
from proxy.settings import CompactionSettings, MicrocompactSettings
from tests.factories import (assistant_calls, call, chat, r_call, r_output, r_user, read,
                             responses, stage_context, tool_result, user)

HOUR = 3600.0


def _reads(n: int) -> tuple:
    messages = [user("go")]
    for i in range(n):
        messages += [assistant_calls(read(f"c{i}", f"f{i}.py")), tool_result(f"c{i}", f"body {i} " * 50)]
    return chat(*messages, user("next"))


def _cleared(entries: tuple) -> list[int]:
    return [i for i, e in enumerate(entries) if content_text(e) == CLEARED_TEXT]


def test_idle_thread_clears_old_results_but_the_latest_five() -> None:
    entries = _reads(8)  # results at 2, 4, ..., 16
    out = microcompact(entries, stage_context(entries, tail=1, now=7 * HOUR, last_activity=0.0,
                                              message_ids=[f"m{i}" for i in range(len(entries))]))
    assert _cleared(out.entries) == [2, 4, 6]
    assert out.mark == MicrocompactMark("m6", 6, 7 * HOUR)
    assert out.report.changed == 3 and out.report.tokens_saved > 0
    assert out.entries[1] is entries[1] and out.entries[8] is entries[8]


def test_idle_thread_with_no_more_results_than_keep_recent_clears_none() -> None:
    """Four results and `keep_recent` 5: all four are among the latest five."""
    entries = _reads(4)  # results at 2, 4, 6, 8
    out = microcompact(entries, stage_context(entries, tail=1, now=7 * HOUR, last_activity=0.0))
    assert out.entries is entries and out.mark is None


def test_busy_thread_without_a_mark_is_untouched() -> None:
    entries = _reads(8)
    out = microcompact(entries, stage_context(entries, tail=1, now=5 * HOUR, last_activity=0.0))
    assert out.entries is entries and out.mark is None


def test_stored_mark_keeps_results_cleared_when_not_idle() -> None:
    entries = _reads(8)
    ids = [f"m{i}" for i in range(len(entries))]
    mark = MicrocompactMark("m6", 6, 0.0)
    out = microcompact(entries, stage_context(entries, tail=1, now=1.0, last_activity=0.0,
                                              mark=mark, message_ids=ids))
    assert _cleared(out.entries) == [2, 4, 6] and out.mark is mark


def test_mark_is_found_by_message_id_before_index() -> None:
    entries = _reads(8)
    ids = [f"m{i}" for i in range(len(entries))]
    out = microcompact(entries, stage_context(entries, tail=1, mark=MicrocompactMark("m4", 12, 0.0),
                                              message_ids=ids))
    assert _cleared(out.entries) == [2, 4]
    by_index = microcompact(entries, stage_context(entries, tail=1, mark=MicrocompactMark(None, 4, 0.0),
                                                   message_ids=ids))
    assert _cleared(by_index.entries) == [2, 4]


def test_a_mark_whose_message_is_gone_clears_nothing() -> None:
    """Summarized by a compaction (or edited away): its index counted another list's entries."""
    entries = _reads(8)
    ids = [f"m{i}" for i in range(len(entries))]
    out = microcompact(entries, stage_context(entries, tail=1, mark=MicrocompactMark("gone", 4, 0.0),
                                              message_ids=ids))
    assert _cleared(out.entries) == []


def test_window_and_unlisted_tools_are_never_cleared() -> None:
    settings = CompactionSettings(microcompact=MicrocompactSettings(keep_recent=0, tools=("grep",)))
    entries = chat(user(), assistant_calls(read("a")), tool_result("a", "x" * 100),
                   assistant_calls(call("grep", "b")), tool_result("b", "y" * 100),
                   assistant_calls(call("grep", "c")), tool_result("c", "z" * 100))
    out = microcompact(entries, stage_context(entries, tail=2, settings=settings, now=1e9,
                                              last_activity=0.0))
    assert _cleared(out.entries) == [4]


def test_microcompact_is_idempotent() -> None:
    entries = _reads(8)
    ctx = stage_context(entries, tail=1, now=7 * HOUR, last_activity=0.0)
    once = microcompact(entries, ctx)
    twice = microcompact(once.entries, stage_context(once.entries, tail=1, now=7 * HOUR,
                                                     last_activity=0.0, mark=once.mark))
    assert twice.entries is once.entries and twice.mark == once.mark


def test_responses_outputs_with_parts_are_cleared_to_text() -> None:
    entries = responses(r_user(), r_call("read_file", "a"),
                        r_output("a", [{"type": "input_text", "text": "long " * 100}]),
                        *[x for i in range(5) for x in (r_call("grep", f"g{i}"), r_output(f"g{i}"))],
                        r_user("next"))
    out = microcompact(entries, stage_context(entries, tail=1, now=1e9, last_activity=0.0))
    assert out.entries[2].raw == {"type": "function_call_output", "call_id": "a", "output": CLEARED_TEXT}


def test_a_cancellation_notice_is_never_cleared() -> None:
    # Repair's notice says what happened to the call; cleared, the call would read as if it
    # had returned a result that was later dropped (SPEC §5: never invent an outcome).
    entries = repair(chat(user("go"), assistant_calls(read("lost", "g.py")),
                           *(e.raw for e in _reads(6)[1:]))).entries
    assert content_text(entries[2]) == CANCELLED_TEXT  # results at 2 (the notice), 4, ..., 14
    out = microcompact(entries, stage_context(entries, tail=1, now=7 * HOUR, last_activity=0.0))
    assert out.entries[2] is entries[2]
    assert _cleared(out.entries) == [4]  # the notice does not count among the latest five either


def test_idle_thread_clears_old_legacy_function_results_too() -> None:
    # The deprecated form: `function_call` on the assistant message, answered by a
    # `role: "function"` message named after the function. Its result is a tool result.
    messages = [user("go")]
    for i in range(8):
        messages += [{"role": "assistant", "content": None,
                      "function_call": {"name": "read_file", "arguments": f'{{"path": "f{i}.py"}}'}},
                     {"role": "function", "name": "read_file", "content": f"body {i} " * 50}]
    entries = chat(*messages, user("next"))
    out = microcompact(entries, stage_context(entries, tail=1, now=7 * HOUR, last_activity=0.0))
    assert _cleared(out.entries) == [2, 4, 6]
    assert [out.entries[i].raw for i in (2, 4, 6)] == [
        {"role": "function", "name": "read_file", "content": CLEARED_TEXT}] * 3
    assert out.entries[8:] == entries[8:] and out.mark is not None


def test_a_legacy_result_whose_function_is_not_compactable_stays() -> None:
    messages = [user("go")]
    for i in range(8):
        messages += [{"role": "assistant", "content": None,
                      "function_call": {"name": "run_tests", "arguments": "{}"}},
                     {"role": "function", "name": "run_tests", "content": f"log {i} " * 50}]
    entries = chat(*messages, user("next"))
    settings = CompactionSettings(microcompact=MicrocompactSettings(tools=("read_*",)))
    out = microcompact(entries, stage_context(entries, tail=1, now=7 * HOUR, last_activity=0.0,
                                              settings=settings))
    assert out.entries is entries
