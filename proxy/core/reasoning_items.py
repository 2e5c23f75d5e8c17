"""Responses `reasoning` items and the server ids of what they produced (PROTOCOL.md §2.3).

A reasoning item must sit directly before an item it produced (an assistant message, a
`*_call`, an MCP tool list or approval request). When one is dropped, the `id` of the items that
followed it in its turn (`fc_…`, `msg_…`) goes too, `call_id` stays: an item whose id names a
missing reasoning item is rejected, while a message or function call without an id is accepted,
so removing one too many is harmless.
Server-side items (`web_search_call`, `mcp_call`, `computer_call`, ...) are different: their
`id` is required (openai-python `response_input_item_param.py`) and, kept with its id but
without its reasoning item, one is refused ("Item 'ws_…' of type 'web_search_call' was provided
without its required 'reasoning' item", seen live by several clients). Such an item therefore
goes with the reasoning item it follows, and so do the outputs that answer it. Shared by repair
(reasoning left without its item) and the sanitizer (reasoning dropped by policy). Another call
of the step under the same id, which shared such an output, is then left without one: repair
answers it in a second pass, the cascade after the sanitizer (`shared_outputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from proxy.conversation import Api, Entry, Kind, reference_id, without_keys


_TURN = (Kind.USER, Kind.INSTRUCTION)
# Produced items whose `id` the API requires: they cannot lose it (see above).
ID_REQUIRED = frozenset({
    "web_search_call", "file_search_call", "computer_call", "code_interpreter_call",
    "image_generation_call", "local_shell_call", "mcp_call", "mcp_list_tools",
    "mcp_approval_request",
})


def is_produced(entry: Entry) -> bool:
    """An item a reasoning item can produce: an assistant message, any `*_call` item, an MCP
    tool list or approval request."""
    if entry.api is not Api.RESPONSES:
        return False
    if entry.kind in (Kind.ASSISTANT, Kind.CALL):
        return True
    type_ = entry.raw.get("type")
    return entry.kind is Kind.OTHER and isinstance(type_, str) and (
        type_.endswith("_call") or type_ in ID_REQUIRED)


def needs_its_id(entry: Entry) -> bool:
    type_ = entry.raw.get("type")
    return entry.api is Api.RESPONSES and isinstance(type_, str) and type_ in ID_REQUIRED


def is_server_tool_item(entry: Entry) -> bool:
    """An item a server tool made (a web search, a code run, ...): id-required, and no call."""
    return entry.kind is Kind.OTHER and needs_its_id(entry)


def unfollowed_reasoning(entries: Sequence[Entry]) -> set[int]:
    """Reasoning items not directly followed by an item they produced."""
    return {i for i, e in enumerate(entries)
            if e.kind is Kind.REASONING and (i + 1 == len(entries) or not is_produced(entries[i + 1]))}


@dataclass(frozen=True, slots=True)
class Dropped:
    entries: tuple[Entry, ...]
    origins: tuple[int | None, ...]
    reasoning: int
    ids_removed: int
    items_dropped: int = 0  # server items (and their outputs) gone with their reasoning item


def drop_reasoning(entries: Sequence[Entry], origins: Sequence[int | None],
                   drop: Callable[[int, Entry], bool], *, upstream: bool = True,
                   step_ends: Collection[int] = ()) -> Dropped:
    """Remove the reasoning items `drop` picks, the server ids of the items they produced, and
    the server items that cannot go without their id. Not `upstream` (a transcript or history
    file, never sent as items): those items stay, without their id, as everything else.
    `step_ends`: where an entry ends its step as an output would (repair's note for removed
    calls): the items after it come from a later response, never from a reasoning item before."""
    doomed = {i for i, e in enumerate(entries) if e.kind is Kind.REASONING and drop(i, e)}
    if not doomed:
        return Dropped(tuple(entries), tuple(origins), 0, 0)
    strip = _produced_after(entries, doomed)
    gone = _items_of(entries, doomed, step_ends) if upstream else set()
    out: list[Entry] = []
    kept_origins: list[int | None] = []
    ids_removed = 0
    for i, entry in enumerate(entries):
        if i in doomed or i in gone:
            continue
        # An id-required item still here has its own reasoning item, when going upstream.
        if i in strip and "id" in entry.raw and not (upstream and needs_its_id(entry)):
            entry = without_keys(entry, ("id",))
            ids_removed += 1
        out.append(entry)
        kept_origins.append(origins[i])
    return Dropped(tuple(out), tuple(kept_origins), len(doomed), ids_removed, len(gone))


def _produced_after(entries: Sequence[Entry], doomed: set[int]) -> set[int]:
    """The produced items after a dropped reasoning item, up to the next user or system
    message: its turn. Which of them named it is not known (outputs and other reasoning items
    may sit in between), and removing an id is always accepted, so all of them lose theirs."""
    found: set[int] = set()
    stripping = False
    for j, entry in enumerate(entries):
        if j in doomed:
            stripping = True
        elif entry.kind in _TURN:
            stripping = False
        elif stripping and is_produced(entry):
            found.add(j)
    return found


def _items_of(entries: Sequence[Entry], doomed: set[int],
              step_ends: Collection[int] = ()) -> set[int]:
    """The id-required items whose reasoning item (the nearest one before them in their turn
    and step) is doomed, and the later items that answer them (up to a kept call that makes
    their id again): a `*_call_output` by the call it answers, an MCP approval response by the
    request's id."""
    found: set[int] = set()
    answered: set[str] = set()
    owner: int | None = None
    for j, entry in enumerate(entries):
        if entry.kind is Kind.REASONING:
            owner = j
        elif entry.kind in _TURN or j in step_ends or reference_id(entry) is not None:
            # An item_reference may be the step's own reasoning, stored upstream: what follows
            # it is not known to be the doomed item's.
            owner = None
        elif owner in doomed and needs_its_id(entry):
            found.add(j)
            answered.update(v for v in (entry.raw.get("id"), entry.raw.get("call_id"))
                            if isinstance(v, str))
        elif answered and _answers(entry) & answered:
            found.add(j)
        elif entry.calls:
            # A kept call under a gone one's id (servers number calls per response): the
            # outputs after it are its own.
            answered.difference_update(c.id for c in entry.calls)
    return found


def unreasoned_items(entries: Sequence[Entry],
                     named: Collection[str] = ()) -> tuple[set[int], set[int]]:
    """The items no reasoning item comes before in their turn, nor an item_reference (it may be
    that reasoning item, stored upstream), nor since an item whose id is `named` (an upstream
    said its reasoning item is missing), and the produced items right before such an item
    (`_named_runs`): the id-required ones and the later items that answer them (up to a call
    that makes their id again), which cannot go without their id; and the other produced
    items with an id, which can.

    A refusal names the first item it finds without its reasoning item only. Past the named
    one, up to the next reasoning item, come the rest of its response's output (outputs
    between, for a client that answers each call as it goes) and responses that lost theirs
    too; the turn rule misses all of them when another step's reasoning item (in practice a
    reference: the retry's policy drops the reasoning items) comes before them in the turn."""
    gone: set[int] = set()
    stripped: set[int] = set()
    answered: set[str] = set()
    at, before = _named_runs(entries, named) if named else (frozenset(), frozenset())
    reasoned = False
    for j, entry in enumerate(entries):
        if entry.kind is Kind.REASONING or reference_id(entry) is not None:
            reasoned = True
            continue
        if entry.kind in _TURN:
            reasoned = False
            continue
        if j in at:
            reasoned = False
        suspect = not reasoned or j in before
        if suspect and needs_its_id(entry):
            gone.add(j)
            answered.update(v for v in (entry.raw.get("id"), entry.raw.get("call_id"))
                            if isinstance(v, str))
        elif answered and _answers(entry) & answered:
            gone.add(j)
        else:
            if suspect and "id" in entry.raw and is_produced(entry):
                stripped.add(j)
            if entry.calls:
                answered.difference_update(c.id for c in entry.calls)
    return gone, stripped


def _named_runs(entries: Sequence[Entry],
                named: Collection[str]) -> tuple[frozenset[int], frozenset[int]]:
    """Where the items whose ids are `named` are, and the produced items right before each
    with nothing else between: its response's output may have begun among them (an assistant
    message before a web search). Not when a reasoning item (or a reference) stands right
    before them: then they are taken for that one's own."""
    names = frozenset((named,) if isinstance(named, str) else named)  # one id, not its letters
    at = frozenset(j for j, entry in enumerate(entries)
                   if isinstance(id_ := entry.raw.get("id"), str) and id_ in names)
    before: set[int] = set()
    for j in at:
        start = j
        while start > 0 and is_produced(entries[start - 1]):
            start -= 1
        first = entries[start - 1] if start > 0 else None
        if first is None or (first.kind is not Kind.REASONING and reference_id(first) is None):
            before.update(range(start, j))
    return at, frozenset(before)


def _answers(entry: Entry) -> set[str]:
    if entry.answers is not None:  # a `*_call_output` (`conversation` reads whichever id it uses)
        return {entry.answers}
    request = entry.raw.get("approval_request_id")
    if entry.raw.get("type") == "mcp_approval_response" and isinstance(request, str):
        return {request}
    return set()
