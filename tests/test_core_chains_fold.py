"""Collapse's chains, folded on from where the last list's fold stopped (`_Folded`), are the
chains folded over the whole list (the plain fold is kept here as the oracle), whatever the
next request does to the last one: extend, edit, cut, reorder, insert."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entry
from proxy.core import collapse
from proxy.core.collapse import Run, ToolGlobs, _explores_key, tool_sets
from proxy.core.groups import Group, tool_groups
from proxy.settings import DEFAULT_EXPLORATION_TOOLS, DEFAULT_SHELL_TOOLS
from tests.factories import entries_of
from tests.test_core_checked import _next_request
from tests.test_properties_collapse import exploring

_TOOL_SETS = (tool_sets(DEFAULT_EXPLORATION_TOOLS), tool_sets(("read_file", "grep")),
              tool_sets(("bash",)), tool_sets(DEFAULT_EXPLORATION_TOOLS, DEFAULT_SHELL_TOOLS))


def _chains_whole(entries: Sequence[Entry], tools: ToolGlobs) -> list[Run]:
    """The oracle: every group of the list folded from the start, nothing resumed."""
    chains, current = collapse._fold(entries, tool_groups(entries), _explores_key(tools), tools,
                                     [], [])
    return chains + [Run(tuple(current))] if current else chains


@given(exploring(), st.sampled_from(_TOOL_SETS), st.data())
def test_the_resumed_fold_finds_the_chains_of_the_whole_list(drawn: tuple[str, list],
                                                             tools: ToolGlobs,
                                                             data: st.DataObject) -> None:
    api, first = drawn
    second = data.draw(_next_request(api, first))
    more = data.draw(exploring())
    third = second + more[1] if more[0] == api else second
    fourth = data.draw(_next_request(api, third))
    for elements in (first, second, second, third, fourth, first):
        entries = entries_of(api, elements)
        assert collapse._chains(entries, tools) == _chains_whole(entries, tools)


def test_a_steady_thread_folds_only_what_follows_the_last_step(monkeypatch: pytest.MonkeyPatch) -> None:
    starts: list[int] = []

    def spy(entries: Sequence[Entry], start: int = 0) -> list[Group]:
        starts.append(start)
        return tool_groups(entries, start)

    monkeypatch.setattr(collapse, "tool_groups", spy)
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}]}
    elements: list[Any] = [{"role": "user", "content": "go"}]
    for n in range(6):
        step = {**call, "tool_calls": [{**call["tool_calls"][0], "id": f"c{n}"}]}
        elements += [step, {"role": "tool", "tool_call_id": f"c{n}", "content": "ok"}]
        entries = entries_of("chat", elements)
        read = tool_sets(("read_file",))
        assert collapse._chains(entries, read) == _chains_whole(entries, read)
    # Each list ends with a step's results: the fold goes on from the end of the step before.
    assert starts == [0, 0, 3, 5, 7, 9]
