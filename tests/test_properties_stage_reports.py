"""What each cascade stage reports is what its output shows (the request line's `stages`,
`tokens_saved`, `proxy_tokens_saved_total`).

Each stage's run is recorded inside a real cascade, and its report read back from the lists it
took and gave: `changed` is 0 exactly when it gave back the entries it took; truncate and
microcompact count the entries they replaced in place, collapse the entries it folded away;
`tokens_saved` is the tokens of what it took minus the tokens of what it gave. So the
cascade's total is the client's tokens minus the projection's.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, example, given
from hypothesis import strategies as st

from proxy.conversation import Entries
from proxy.core.cascade import STAGES, CascadeContext, Stage, run_cascade
from proxy.core.stage import StageContext, StageResult
from proxy.settings import CompactionSettings
from tests.factories import assistant_calls, entries_of, measure, read, tool_result, user
from tests.strategies import cascade_contexts, conversations, interrupted

Recorded = list[tuple[str, Entries, StageResult]]



@st.composite
def _cases(draw: st.DrawFn) -> tuple[str, list, CascadeContext]:
    api = draw(st.sampled_from(("chat", "responses")))
    elements = draw(conversations(api, messy=True) | interrupted(api)
                    | (conversations(api, messy=True, legacy=True) if api == "chat" else st.nothing()))
    return api, elements, draw(cascade_contexts(len(elements), compaction=draw(st.booleans())))


def _reads(n: int) -> list:
    """A run of `n` long file reads (collapse folds all but the last, drawn runs seldom)."""
    return [m for k in range(n) for m in (assistant_calls(read(f"call_{k}", f"src/m{k}.py")),
                                          tool_result(f"call_{k}", "line of code\n" * 200))]


def _recording(log: Recorded) -> tuple[Stage, ...]:
    def recorded(stage: Stage) -> Stage:
        def run(entries: Entries, ctx: StageContext) -> StageResult:
            result = stage.run(entries, ctx)
            log.append((stage.name, entries, result))
            return result
        return replace(stage, run=run)
    return tuple(map(recorded, STAGES))


def _tokens(entries: Entries) -> int:
    return sum(map(measure, entries))


def _same(before: Entries, after: Entries) -> bool:
    return len(before) == len(after) and all(a is b for a, b in zip(before, after))


def _replaced_in_place(before: Entries, after: Entries) -> int:
    assert len(before) == len(after)
    return sum(a is not b for a, b in zip(before, after))


def _left_out(before: Entries, after: Entries) -> int:
    kept = {id(e) for e in after}
    return sum(id(e) not in kept for e in before)


_COUNTED = {"truncate": _replaced_in_place, "microcompact": _replaced_in_place, "collapse": _left_out}


@example(("chat", [user(), *_reads(3), user("next")],
          CascadeContext(CompactionSettings(), measure=measure, keep_messages=1)))
@given(_cases())
def test_every_stage_reports_what_its_output_shows(case: tuple[str, list, CascadeContext]) -> None:
    api, elements, context = case
    entries = entries_of(api, elements)
    log: Recorded = []
    result = run_cascade(entries, context, stages=_recording(log))
    for name, before, stage in log:
        report = stage.report
        event(f"{name} changed" if report.changed else f"{name} unchanged")
        assert report.name == name
        assert (report.changed == 0) == _same(before, stage.entries), name
        assert report.tokens_saved == _tokens(before) - _tokens(stage.entries), name
        if name in _COUNTED:
            assert report.changed == _COUNTED[name](before, stage.entries), name
    assert result.tokens_saved == _tokens(entries) - _tokens(result.entries)
    assert result.changed == any(r.changed for r in result.reports)
    if not result.changed:
        assert _same(entries, result.entries)
