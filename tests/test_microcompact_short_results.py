"""Microcompact never grows a result: one the marker would not make smaller ("ok", an empty
output, anything shorter than `[Old tool result content cleared]`) is left as the client's
own entry, idle or under a stored mark, and names no mark (SPEC §4.3: the cheap stages save
tokens, deterministic and monotone)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import content_text
from proxy.core.microcompact import CLEARED_TEXT, microcompact
from proxy.records import MicrocompactMark
from proxy.settings import CompactionSettings, MicrocompactSettings
from tests.factories import (assistant_calls, chat, measure, r_call, r_output, r_user, read,
                             responses, stage_context, tool_result, user)

IDLE = {"now": 7 * 3600.0, "last_activity": 0.0}


def _reads(bodies: list[str]) -> tuple:
    messages = [user("go")]
    for i, body in enumerate(bodies):
        messages += [assistant_calls(read(f"c{i}", f"f{i}.py")), tool_result(f"c{i}", body)]
    return chat(*messages, user("next"))


def test_a_short_old_result_is_left_as_the_clients_entry() -> None:
    entries = _reads(["ok", "body " * 50, ""] + ["recent " * 20] * 5)  # results at 2, 4, ..., 16
    out = microcompact(entries, stage_context(entries, tail=1, **IDLE))
    assert out.entries[2] is entries[2] and out.entries[6] is entries[6]
    assert content_text(out.entries[4]) == CLEARED_TEXT
    assert out.report.changed == 1 and out.report.tokens_saved > 0
    assert out.mark == MicrocompactMark(None, 4, IDLE["now"])


def test_old_results_all_too_short_change_nothing_and_store_no_mark() -> None:
    entries = _reads(["ok", "done", "[]"] + ["recent " * 20] * 5)
    out = microcompact(entries, stage_context(entries, tail=1, **IDLE))
    assert out.entries is entries and out.mark is None and out.report.tokens_saved == 0


def test_a_short_responses_output_is_left_too() -> None:
    entries = responses(r_user(), r_call("read_file", "a"), r_output("a", "ok"),
                        *[x for i in range(5) for x in (r_call("grep", f"g{i}"), r_output(f"g{i}"))],
                        r_user("next"))
    out = microcompact(entries, stage_context(entries, tail=1, **IDLE))
    assert out.entries[2] is entries[2]


_body = st.one_of(st.sampled_from(("", "ok", "done", "1", "[]", "x" * 30, "y" * 40)),
                  st.text(max_size=120))


@given(st.lists(_body, min_size=1, max_size=12), st.integers(0, 3), st.booleans())
def test_microcompact_only_shrinks_and_keeps_what_it_did(bodies: list[str], keep: int,
                                                         more: bool) -> None:
    settings = CompactionSettings(microcompact=MicrocompactSettings(keep_recent=keep))
    entries = _reads(bodies)
    out = microcompact(entries, stage_context(entries, tail=1, settings=settings, **IDLE))
    for before, after in zip(entries, out.entries, strict=True):
        assert after is before or measure(after) < measure(before)
    assert out.report.tokens_saved >= 0
    # Sticky and monotone: the next request (a new turn, not idle) under the stored mark keeps
    # exactly what this one did to the same entries.
    later = _reads(bodies + ["z" * 200] * more)
    ctx = stage_context(later, tail=1, settings=settings, mark=out.mark, now=IDLE["now"] + 1,
                        last_activity=IDLE["now"])
    again = microcompact(later, ctx)
    prefix = len(entries) - 1  # all but the closing user message
    assert [e.to_bytes() for e in again.entries[:prefix]] == [e.to_bytes() for e in out.entries[:prefix]]
