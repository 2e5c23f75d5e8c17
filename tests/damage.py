"""How clients damage a conversation: the `messy=True` moves of `tests.strategies`.

Interrupted calls (a result lost), orphan results, duplicate results, results moved away from
their call, two parallel calls given one id, and (Responses) reasoning items left dangling. In
chat a legacy `function` result is lost, doubled or moved as a `tool` one is, and a stray one
(named after a drawn tool or not) comes as an orphan.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from proxy.testing.responses_rules import ID_REQUIRED

Wire = dict[str, Any]


@st.composite
def damaged(draw: st.DrawFn, elements: list[Wire], api: str) -> list[Wire]:
    out = list(elements)
    for n in range(draw(st.integers(1, 4))):
        results = [i for i, e in enumerate(out) if is_answer(e)]
        move = draw(st.sampled_from(("interrupt", "orphan", "duplicate", "displace", "dangling", "same id")))
        parallel = _parallel_calls(out)
        if move == "same id" and parallel:
            out = _one_id(out, draw(st.sampled_from(parallel)), draw(st.integers(0, 2)))
        elif move == "interrupt" and results:
            del out[draw(st.sampled_from(results))]
        elif move == "duplicate" and results:
            i = draw(st.sampled_from(results))
            out.insert(draw(st.integers(i + 1, len(out))), out[i])
        elif move == "displace" and results:
            i = draw(st.sampled_from(results))
            out.insert(draw(st.integers(i, len(out) - 1)), out.pop(i))
        elif move == "orphan":
            orphan = ({"type": "function_call_output", "call_id": "call_orphan", "output": "stray"}
                      if api == "responses" else draw(st.sampled_from(_CHAT_ORPHANS)))
            out.insert(draw(st.integers(0, len(out))), orphan)
        elif move == "dangling" and api == "responses":
            # Each its own id: one id sent twice is a client error no repair is asked to fix
            # (upstream's "Duplicate item found", `responses_rules._duplicate`).
            dangling = {"type": "reasoning", "id": f"rs_dangling{n}", "summary": [],
                        "encrypted_content": "gAAAAABx"}
            out.insert(draw(st.integers(0, len(out))), dangling)
    # None is left before a server tool's item, nor before one with only results between (repair
    # drops or moves those): it would stand between that item and the reasoning item its id
    # names, and read as its owner (no response sends two reasoning items in a row; the retry
    # for the refusal is tested on its own).
    return [e for k, e in enumerate(out) if not (_is_dangling(e) and _server_item_next(out, k))]


def _is_dangling(element: Wire) -> bool:
    return element.get("type") == "reasoning" and str(element.get("id")).startswith("rs_dangling")


def _server_item_next(out: list[Wire], k: int) -> bool:
    after = next((e for e in out[k + 1:] if not is_answer(e) and not _is_dangling(e)), None)
    return after is not None and after.get("type") in ID_REQUIRED


# A stray `tool` message, and `function` ones: one named after a tool the strategies draw (it
# may land right after a legacy call of that name), one after none.
_CHAT_ORPHANS = ({"role": "tool", "tool_call_id": "call_orphan", "content": "stray"},
                 {"role": "function", "name": "read_file", "content": "stray"},
                 {"role": "function", "name": "no_such_tool", "content": "stray"})


def _parallel_calls(elements: list[Wire]) -> list[int]:
    """Where a step has a second call: a chat message with two or more, or a Responses call
    item right after another."""
    return [i for i, e in enumerate(elements) if len(e.get("tool_calls") or ()) > 1
            or (i > 0 and _is_call(e) and _is_call(elements[i - 1]))]


def _one_id(elements: list[Wire], i: int, answers: int) -> list[Wire]:
    """A client that numbered two parallel calls alike: their results then share the id too,
    and the client kept both of them, the first only (`answers`: 2, 1) or none (0)."""
    element = elements[i]
    if "tool_calls" in element:
        calls = element["tool_calls"]
        twin, same = calls[1]["id"], calls[0]["id"]
        edited = {**element, "tool_calls": [calls[0], {**calls[1], "id": same}, *calls[2:]]}
        key = "tool_call_id"
    else:
        twin, same = element["call_id"], elements[i - 1]["call_id"]
        edited = {**element, "call_id": same}
        key = "call_id"
    out = []
    for k, e in enumerate(elements):
        if is_result(e) and e.get(key) in (same, twin):
            if (answers == 0 or (answers == 1 and e.get(key) == twin)) and k > i:
                continue
            e = {**e, key: same}
        out.append(edited if k == i else e)
    return out


def _is_call(element: Wire) -> bool:
    return element.get("type") in ("function_call", "custom_tool_call")


def is_result(element: Wire) -> bool:
    return element.get("role") == "tool" or str(element.get("type", "")).endswith("_call_output")


def is_answer(element: Wire) -> bool:
    """A result of either chat form: a tool result, or a legacy `function` message."""
    return is_result(element) or element.get("role") == "function"


@st.composite
def with_shared_id(draw: st.DrawFn, elements: list[Wire]) -> list[Wire]:
    """The list with two parallel calls of one step given one id (when it has such a step),
    their results kept, the first only, or none: the "same id" damage, drawn every time."""
    parallel = _parallel_calls(elements)
    if not parallel:
        return elements
    return _one_id(elements, draw(st.sampled_from(parallel)), draw(st.integers(0, 2)))
