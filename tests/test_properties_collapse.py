"""Collapse contents as properties (SPEC §4.1), over conversations made of exploration runs.

The general conversation strategy rarely makes two exploration-only steps in a row; here most
steps explore (one to three parallel read_file / grep / glob / ... calls, no text), with bash
or edit steps and text replies between runs, and results whose status is known when drawn. A
chat client of the legacy API makes each step one `function_call` answered by the `function`
message after it.
What is folded is read off the output; what the record must say comes from the input.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from proxy.conversation import Entries, Entry, Kind, content_text
from proxy.core.cascade import CascadeContext, run_cascade
from proxy.core.exploration import HEADER
from proxy.core.sanitize import Policy
from proxy.settings import CompactionSettings, MicrocompactSettings, TruncateSettings
from tests.factories import entries_of, measure
from tests.strategies import EXPLORATION, OTHER_TOOLS, PATHS, conversation_of

RECORD_OPENING = HEADER.split("{")[0]
OK = ("src/app.py:12: def main():", "1 match\nsrc/路径/模块.py:3", "print('hi')\n" * 5, "")
FAILED = ("Error: No such file or directory", "Traceback (most recent call last):\n  boom")
_ARG_KEYS = ("path", "pattern", "query", "start_line", "end_line")


@st.composite
def _call(draw: st.DrawFn, n: int, explore: bool) -> dict[str, Any]:
    name = draw(st.sampled_from(EXPLORATION if explore else OTHER_TOOLS))
    path = draw(st.sampled_from(PATHS))
    arguments: dict[str, Any] = {"path": path}
    if name in ("grep", "glob", "search"):
        arguments["pattern"] = draw(st.sampled_from(("TODO", "def main", "*.py", "修复", 'a "b"')))
    elif name == "web_search":
        arguments = {"query": draw(st.text(max_size=12))}
    elif name == "read_file" and draw(st.booleans()):
        arguments |= {"start_line": 3, "end_line": draw(st.integers(3, 90))}
    elif not explore:
        arguments["command"] = "x" * draw(st.integers(0, 300))
    failed = draw(st.integers(0, 3)) == 0
    return {"id": f"call_{n}", "name": name, "custom": False, "arguments": json.dumps(arguments),
            "result": draw(st.sampled_from(FAILED if failed else OK)), "parts": False, "failed": failed}


@st.composite
def exploring(draw: st.DrawFn) -> tuple[str, list]:
    api = draw(st.sampled_from(("chat", "responses")))
    counter = iter(range(10_000))
    legacy = api == "chat" and draw(st.integers(0, 2)) == 0
    turns = []
    for _ in range(draw(st.integers(1, 3))):
        steps: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(2, 8))):
            kind = draw(st.sampled_from(("explore",) * 5 + ("other", "text")))
            if kind == "text":
                steps.append({"text": "Found it.", "calls": []})
                continue
            # A client of the legacy API makes one call a step (`function_call`).
            width = 1 if legacy else draw(st.integers(1, 3))
            calls = [draw(_call(next(counter), kind == "explore")) for _ in range(width)]
            steps.append({"text": None, "calls": calls, "legacy": legacy})
        turns.append({"user": "look around", "image": False, "empty": False, "steps": steps})
    if draw(st.integers(0, 3)):  # mostly a later turn: the last run then has left the window
        turns.append({"user": "now fix it", "image": False, "empty": False, "steps": []})
    return api, draw(conversation_of(api, turns))


def _collapsed(api: str, elements: list, keep: int) -> tuple[Entries, Any]:
    entries = entries_of(api, elements)
    # Collapse alone, the window at the end, the sanitizer held: what changed is collapse's.
    settings = CompactionSettings(truncate=TruncateSettings(enabled=False),
                                  microcompact=MicrocompactSettings(enabled=False))
    context = CascadeContext(settings, measure=measure, keep_messages=keep, policy=Policy.TRANSPARENT)
    return entries, run_cascade(entries, context)


def _calls(entry: Entry) -> list[tuple[str, str]]:
    """(name, arguments) of the calls an entry makes, a legacy `function_call` included."""
    legacy = entry.raw.get("function_call") if entry.kind is Kind.ASSISTANT else None
    if isinstance(legacy, dict) and not entry.calls:
        return [(legacy["name"], legacy["arguments"])]
    return [(c.name, c.arguments) for c in entry.calls]


def _is_result(entry: Entry) -> bool:
    return entry.kind is Kind.RESULT or entry.raw.get("role") == "function"


def _explores(entry: Entry) -> bool:
    calls = _calls(entry)
    return bool(calls) and all(name in EXPLORATION for name, _ in calls)


def _folded_blocks(entries: Entries, kept: set[int]) -> list[range]:
    blocks: list[range] = []
    i = 0
    while i < len(entries):
        if i in kept:
            i += 1
            continue
        j = i
        while j < len(entries) and j not in kept:
            j += 1
        blocks.append(range(i, j))
        i = j
    return blocks


@given(exploring(), st.integers(0, 3))
def test_collapse_folds_only_exploration_steps_and_keeps_the_last_one(drawn: tuple, keep: int) -> None:
    api, elements = drawn
    entries, result = _collapsed(api, elements, keep)
    kept = {o for o in result.origins if o is not None}
    records = [e for e, o in zip(result.entries, result.origins, strict=True) if o is None]
    blocks = _folded_blocks(entries, kept)
    event("collapsed" if records else "nothing collapsed")
    assert len(records) == len(blocks)
    for block in blocks:
        for i in block:  # folded: an exploration call (carrier), its result or reasoning item
            entry = entries[i]
            assert _explores(entry) or _is_result(entry) or entry.kind is Kind.REASONING, (i, entry.raw)
            if not _is_result(entry):
                assert entry.kind is Kind.CALL or not content_text(entry).strip()
        last = block.stop  # the run's last step follows its record, verbatim
        while last < len(entries) and entries[last].kind is Kind.REASONING:
            last += 1
        assert last < len(entries) and last in kept and _explores(entries[last])
    for entry, origin in zip(result.entries, result.origins, strict=True):
        if origin is not None:
            assert entry is entries[origin]


@given(exploring(), st.integers(0, 3))
def test_the_record_names_every_folded_call_and_its_status(drawn: tuple, keep: int) -> None:
    api, elements = drawn
    entries, result = _collapsed(api, elements, keep)
    kept = {o for o in result.origins if o is not None}
    records = [content_text(e) for e, o in zip(result.entries, result.origins, strict=True) if o is None]
    for record, block in zip(records, _folded_blocks(entries, kept), strict=True):
        assert record.startswith(RECORD_OPENING)
        calls = _calls_with_results(entries, block)
        results = [i for i in block if _is_result(entries[i])]
        lines = record.split("\n")[1:]
        lines = [line for line in lines if line.startswith("- ")]
        assert len(lines) == len(calls) == len(results)
        if any(entries[i].raw.get("role") == "function" for i in block):
            event("a run of legacy calls collapsed")
        for (name, arguments, result), line in zip(calls, lines, strict=True):
            assert line.startswith(f"- {name} ")
            for key, value in json.loads(arguments).items():
                if key in _ARG_KEYS:
                    assert f"{json.dumps(key)}:{json.dumps(value, ensure_ascii=False)}" in line, (key, line)
            status = "error" if result in FAILED else "ok"
            assert f"-> {status}," in line, (result, line)


def _calls_with_results(entries: Entries, block: range) -> list[tuple[str, str, str]]:
    """(name, arguments, result text) of each call in the block, the result as the input pairs
    it: by id, or (the legacy form) the message right after the call."""
    out = []
    for i in block:
        if entries[i].kind is Kind.ASSISTANT and not entries[i].calls and _calls(entries[i]):
            out += [(*_calls(entries[i])[0], content_text(entries[i + 1]))]
        for call in entries[i].calls:
            result = next(e for e in entries[i + 1:] if e.kind is Kind.RESULT and e.answers == call.id)
            out.append((call.name, call.arguments, content_text(result)))
    return out


@given(exploring(), st.integers(0, 3))
def test_a_record_is_always_smaller_than_the_steps_it_folds(drawn: tuple, keep: int) -> None:
    """Collapse is a cheap stage that saves tokens: a record that would not (a run of tiny
    steps, whose note and lines outweigh them) is not made, and the run stays as sent."""
    api, elements = drawn
    entries, result = _collapsed(api, elements, keep)
    kept = {o for o in result.origins if o is not None}
    records = [e for e, o in zip(result.entries, result.origins, strict=True) if o is None]
    for record, block in zip(records, _folded_blocks(entries, kept), strict=True):
        assert measure(record) < sum(measure(entries[i]) for i in block)
    assert sum(map(measure, result.entries)) <= sum(map(measure, entries))
