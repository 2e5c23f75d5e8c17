"""Collapse (SPEC §4.1): a run of completed exploration steps becomes one compact record.

A run is two or more consecutive tool steps (`groups`) whose calls all name exploration tools
(settings: read_file, grep, glob, ...; globs, `tool_names`) or are shell calls whose command line
only reads (`shell_tools`, `shell_reads`), each answered exactly once with a real result (not a
cancelled one), with no text from the assistant alongside. When a whole run lies outside the
protected window and something that is not part of it follows, every step but the last is
replaced by one record; the last step (its calls and results) stays verbatim. A run whose
record would not be smaller than the steps it folds (by the stage's token measure) stays as
sent: the record is there to save tokens, not to restate a few tiny results at greater length.

What the record is: one assistant *text* message (`make_assistant`), in place of the folded
steps, that opens with a bracketed note saying the proxy wrote it.
- Valid everywhere: a text-only assistant message may follow tool results and precede a call
  message in chat, and an assistant `message` item without `id` needs no reasoning item in
  Responses; the folded calls leave together with their results, so nothing is orphaned. A
  legacy `function_call` step (`legacy_calls`) leaves with the `function` message right after
  it, and the kept last step keeps that pair whole: each `function` message still follows its
  call, and the id the proxy gives such a call for pairing is written nowhere.
- Not a user turn: a user message there would move "the latest user message" (the sanitizer's
  and DeepSeek's current-turn boundary), break Mistral's no-user-after-tool rule and read as
  if the user had spoken. A system message would be hoisted into the system prompt by the
  Anthropic and Gemini compatibility layers, invalidating their whole prompt cache.
- Not a tool call: a synthetic call would need Gemini signatures and would look like the model
  acted. The opening note makes plain the record is the proxy's, not the model's words.
- Deterministic: the text comes from the calls and results only (`exploration`).

Monotone: runs are found over the whole list, so a run's extent does not depend on the window;
`settled_start` moves the window start back to the start of a run it would cut, so a run is
folded only once it has wholly left the window and is then never folded differently.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from proxy.conversation import Api, Entry, Kind, ToolCall, content_text, make_assistant
from proxy.core.boundary import cut_at_or_before
from proxy.core.checked import CheckedLists
from proxy.core.exploration import record_text
from proxy.core.groups import Group, tool_groups
from proxy.core.legacy_calls import answered, step_calls
from proxy.core.repair import is_cancelled
from proxy.core.tool_names import explores
from proxy.core.stage import (Derived, Measure, StageContext, StageReport, StageResult, saved,
                              unchanged, with_key)
from proxy.lru import LRU

NAME = "collapse"
_RECORD = ("collapse.record",)


@dataclass(frozen=True, slots=True)
class Run:
    groups: tuple[Group, ...]

    @property
    def start(self) -> int:
        return self.groups[0].start

    @property
    def end(self) -> int:
        return self.groups[-1].end


ToolGlobs = tuple[tuple[str, ...], tuple[str, ...]]  # (exploration globs, shell tool globs)


def tool_sets(tools: Collection[str], shell_tools: Collection[str] = ()) -> ToolGlobs:
    return tuple(tools), tuple(shell_tools)


def collapsible(entries: Sequence[Entry], group: Group, tools: Collection[str],
                shell_tools: Collection[str] = ()) -> bool:
    which = tool_sets(tools, shell_tools)
    return _collapsible(entries, group, _explores_key(which), which)


def _collapsible(entries: Sequence[Entry], group: Group, key: Hashable, tools: ToolGlobs) -> bool:
    for i in group.call_entries:
        if not _explores(entries[i], key, tools):
            return False
    if not group.answered_once(entries):
        return False
    return not any(is_cancelled(entries[i]) for i in group.results)


def _explores_key(tools: ToolGlobs) -> Hashable:
    return ("collapse.explores", frozenset(tools[0]), frozenset(tools[1]))


def _explores(entry: Entry, key: Hashable, tools: ToolGlobs) -> bool:
    """Every call the entry carries names an exploration tool, and a chat carrier says nothing
    else (no text, no refusal); memoized per entry and tool set."""
    found = entry.memo.get(key)
    if found is None:
        found = all(explores(c, *tools) for c in step_calls(entry)) and (
            entry.kind is Kind.CALL or not (content_text(entry).strip() or entry.raw.get("refusal")))
        entry.memo[key] = found
    return found


def exploration_runs(entries: Sequence[Entry], tools: Collection[str],
                     derived: Derived | None = None,
                     shell_tools: Collection[str] = ()) -> list[Run]:
    """Maximal runs of two or more consecutive collapsible steps, over the whole list."""
    return [chain for chain in chains_of(entries, tool_sets(tools, shell_tools), derived)
            if len(chain.groups) >= 2]


def chains_of(entries: Sequence[Entry], tools: ToolGlobs, derived: Derived | None) -> list[Run]:
    if derived is None:
        return _chains(entries, tools)
    return derived.get(("chains", tools), entries, lambda e: _chains(e, tools))


class _Folded(NamedTuple):
    """The chains of a list, and where the next list that opens with it may go on folding.

    Which steps `tool_groups` finds before a step's end `e < len(entries)` depends only on
    `entries[:e + 1]` (a step ends at the first entry that is not a result, nor a Responses
    call that goes on a step led by a reasoning item (`groups`); a scan that finds
    no step stops before the next step's start), and whether a step is collapsible only on its
    own entries. So a list that opens with this one has the same steps, and the same fold of
    them, up to `resume`: the end of the last step that ends before this list's end (only the
    last step can end at the end, and a later list may give it more results)."""

    resume: int
    closed: tuple[Run, ...]  # the chains closed before `resume`
    current: tuple[Group, ...]  # the chain still open at `resume`
    chains: list[Run]  # the answer for the whole list


_NOTHING_FOLDED = _Folded(0, (), (), [])
# By api and tool set: the same bytes are another entry in the other api.
_FOLDS: LRU[tuple[Api, ToolGlobs], CheckedLists[_Folded]] = LRU(16)


def _chains(entries: Sequence[Entry], tools: ToolGlobs) -> list[Run]:
    """Maximal runs of consecutive collapsible steps, single steps included; a steady thread
    folds only the steps after the last list it folded (`_Folded`)."""
    if not entries:
        return []
    which = (entries[0].api, tools)
    folds = _FOLDS.get(which)
    if folds is None:
        folds = CheckedLists(4096, _NOTHING_FOLDED)
        _FOLDS.put(which, folds)
    folded = folds.walked(tuple(entries), lambda e, _, state: _fold_from(e, state, tools))
    return list(folded.chains)  # type: ignore[union-attr]  # a fold never fails


def _fold_from(entries: Sequence[Entry], state: _Folded, tools: ToolGlobs) -> _Folded:
    groups = tool_groups(entries, state.resume)
    last = groups.pop() if groups and groups[-1].end == len(entries) else None
    key = _explores_key(tools)
    closed, current = _fold(entries, groups, key, tools, list(state.closed), list(state.current))
    resume = groups[-1].end if groups else state.resume
    kept = _Folded(resume, tuple(closed), tuple(current), [])
    if last is not None:
        closed, current = _fold(entries, [last], key, tools, closed, current)
    return kept._replace(chains=closed + [Run(tuple(current))] if current else closed)


def _fold(entries: Sequence[Entry], groups: Sequence[Group], key: Hashable, tools: ToolGlobs,
          chains: list[Run], current: list[Group]) -> tuple[list[Run], list[Group]]:
    for group in groups:
        fits = _collapsible(entries, group, key, tools)
        if current and (current[-1].end != group.start or not fits):
            chains.append(Run(tuple(current)))
            current = []
        if fits:
            current.append(group)
    return chains, current


def settled_start(entries: Sequence[Entry], start: int, tools: Collection[str],
                  safe: Sequence[bool], lead: int, derived: Derived | None = None,
                  shell_tools: Collection[str] = ()) -> int:
    """Move a window start back to the start of an exploration run it would cut, or of a run
    still open at the end of the list (the next step may extend it)."""
    chains = chains_of(entries, tool_sets(tools, shell_tools), derived)
    while True:
        moved = next((c.start for c in chains if _cut_by(c, start, len(entries))), start)
        found = cut_at_or_before(safe, moved, lead)
        moved = lead if found is None else found
        if moved == start:
            return start
        start = moved


def _cut_by(chain: Run, start: int, n: int) -> bool:
    if chain.end == n:
        return chain.start < start
    return len(chain.groups) >= 2 and chain.start < start < chain.end


def collapse(entries: Sequence[Entry], ctx: StageContext) -> StageResult:
    window = ctx.window
    settings = ctx.settings.collapse
    runs = [r for r in exploration_runs(entries, settings.tools, ctx.derived, settings.shell_tools)
            if window.lead <= r.start and r.end <= window.start and r.end < len(entries)]
    folds = [(run, record) for run in runs
             if _shrinks(entries, run, record := record_for(entries, run), ctx.measure)]
    if not folds:
        return unchanged(NAME, entries, ctx)
    out: list[Entry] = []
    origins: list[int | None] = []
    removed: list[Entry] = []
    records: list[Entry] = []
    position = 0
    for run, record in folds:
        last = run.groups[-1].start
        out += entries[position:run.start]
        origins += ctx.origins[position:run.start]
        out.append(record)
        origins.append(None)
        removed += entries[run.start:last]
        records.append(record)
        position = last
    out += entries[position:]
    origins += ctx.origins[position:]
    report = StageReport(NAME, len(removed), saved(ctx.measure, removed, records))
    return StageResult(tuple(out), tuple(origins), report, ctx.mark)


def _shrinks(entries: Sequence[Entry], run: Run, record: Entry, measure: Measure) -> bool:
    """Whether the record is smaller than the steps it would fold. Tiny steps (a listing of
    two names, an "ok") weigh less than the record's note and one line per call: folding them
    would grow the prompt and still change the request. The answer depends only on the run's
    own entries, so a run left as sent stays so on every later request."""
    folded = range(run.start, run.groups[-1].start)
    return measure(record) < sum(measure(entries[i]) for i in folded)


def record_for(entries: Sequence[Entry], run: Run) -> Entry:
    """The record of a run's folded steps, keyed for the token counter's cache.

    The record depends only on the folded entries, so it is kept on the first of them with
    the others, and reused while they are the very same objects: a settled run then costs
    no parsing, and the same record object goes upstream on every request."""
    last = run.groups[-1].start
    rest = tuple(entries[run.start + 1:last])
    memo = entries[run.start].memo
    found = memo.get(_RECORD)
    if found is not None and len(found[0]) == len(rest) and all(a is b for a, b in zip(found[0], rest)):
        return found[1]
    record = with_key(make_assistant(entries[run.start].api, record_text(_pairs(entries, run.groups[:-1]))))
    memo[_RECORD] = (rest, record)  # without the first entry itself: no reference cycle
    return record


def _pairs(entries: Sequence[Entry], groups: Sequence[Group]) -> list[tuple[ToolCall, Entry]]:
    pairs: list[tuple[ToolCall, Entry]] = []
    for group in groups:
        results = {answered(entries, i): entries[i] for i in group.results}
        pairs += [(call, results[call.id]) for call in group.calls]
    return pairs
