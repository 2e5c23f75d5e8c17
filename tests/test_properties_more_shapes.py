"""The cascade's invariants over the shapes `tests.strategies` does not draw (SPEC §4, §5, §11).

`tests.strategies_more.richer` writes the same conversations as real clients also write them:
Responses easy-input messages, file and audio parts, user names, SDK null fields, call
`status`, huge arguments, any key order. Over those, from SPEC alone:
- the projection is valid for the upstream (tool adjacency, no orphan result);
- nothing the proxy made claims a success: a made entry is a cancelled result, a collapse
  record or the interrupted note;
- the leading instructions and the latest user message are the client's bytes, and so is
  the protected window;
- between two requests of a growing list, what lay before the window comes back unchanged;
- a projection rebuilt from a checkpoint is the client's leading instructions, the summary and
  restored messages, then the client's tail byte for byte (the checks of
  `test_properties_rebuild`, over these shapes).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.apply import build_event, rebuild
from proxy.compaction.cutoff import FULL, PARTIAL, choose_cutoff
from proxy.compaction.restore import collect
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Kind, content_text, latest_user_index, leading_instructions
from proxy.core.cascade import CascadeContext, CascadeResult, run_cascade
from proxy.core.exploration import HEADER
from proxy.core.repair import CANCELLED_TEXT, INTERRUPTED_NOTE, MOVED_NOTE
from proxy.core.sanitize import Policy
from proxy.records import CompactionEvent
from proxy.settings import RestoreSettings
from proxy.testing.rules import check_chat, check_responses
from tests.factories import entries_of, measure, wire
from tests.strategies import cascade_contexts, request_points
from tests.strategies_more import richer
from tests.test_compaction_support import count, ids_of
from tests.test_properties_rebuild import _check_rebuilt as check_rebuilt

RECORD_OPENING = HEADER.split("{")[0]
apis = st.sampled_from(("chat", "responses"))


@st.composite
def cases(draw: st.DrawFn, messy: bool | None = None) -> tuple[str, list, CascadeContext]:
    api = draw(apis)
    elements = draw(richer(api, messy=draw(st.booleans()) if messy is None else messy))
    return api, elements, draw(cascade_contexts(len(elements), compaction=draw(st.booleans())))


def _check(api: str, body: list) -> object:
    return check_chat({"messages": body}) if api == "chat" else check_responses({"input": body})


@given(cases())
def test_the_projection_of_any_client_shape_is_valid_for_the_upstream(case: tuple) -> None:
    api, elements, context = case
    result = run_cascade(entries_of(api, elements), context)
    assert _check(api, wire(result.entries)) is None


@given(cases())
def test_nothing_made_by_the_proxy_claims_a_success(case: tuple) -> None:
    api, elements, context = case
    result = run_cascade(entries_of(api, elements), context)
    for entry, origin in zip(result.entries, result.origins, strict=True):
        if origin is None:
            text = content_text(entry)
            assert text in (CANCELLED_TEXT, INTERRUPTED_NOTE, MOVED_NOTE) or \
                (entry.kind is Kind.ASSISTANT and text.startswith(RECORD_OPENING)), text[:200]


@given(cases())
def test_lead_and_latest_user_message_are_the_clients_bytes_under_any_policy(case: tuple) -> None:
    api, elements, context = case
    entries = entries_of(api, elements)
    result = run_cascade(entries, context)
    lead = leading_instructions(entries)
    assert [e.to_bytes() for e in result.entries[:lead]] == [e.to_bytes() for e in entries[:lead]]
    latest, kept = latest_user_index(entries), latest_user_index(result.entries)
    if latest is not None:
        assert kept is not None and result.entries[kept].to_bytes() == entries[latest].to_bytes()


@given(cases(messy=False))
def test_the_protected_window_is_the_clients_bytes(case: tuple) -> None:
    api, elements, context = case
    entries = entries_of(api, elements)
    result = run_cascade(entries, replace(context, policy=Policy.TRANSPARENT, compacted=False))
    tail = len(result.entries) - result.window_start
    assert [e.to_bytes() for e in result.entries[result.window_start:]] == \
           [e.to_bytes() for e in entries[len(entries) - tail:]]


def _window_origin(result: CascadeResult) -> int:
    origins = [o for o in result.origins[result.window_start:] if o is not None]
    return origins[0] if origins else 10**9


@given(apis.flatmap(lambda api: st.tuples(st.just(api), richer(api, max_turns=5))), st.data())
def test_a_growing_list_keeps_what_lay_before_the_window(drawn: tuple, data: st.DataObject) -> None:
    api, elements = drawn
    context = replace(data.draw(cascade_contexts(len(elements))), now=0.0, mark=None,
                      policy=Policy.TRANSPARENT)
    results = [run_cascade(entries_of(api, elements[:p]), context) for p in request_points(elements)]
    for old, new in pairwise(results):
        old_bytes = [e.to_bytes() for e in old.entries]
        new_bytes = [e.to_bytes() for e in new.entries]
        if _window_origin(new) <= _window_origin(old):
            assert new_bytes[:len(old_bytes)] == old_bytes
        else:  # messages newly left the window: only they may change
            assert new_bytes[:old.window_start] == old_bytes[:old.window_start]


# ---------------------------------------------------------------- rebuilt from a checkpoint

@st.composite
def checkpointed(draw: st.DrawFn) -> tuple[str, list, Any]:
    """A valid conversation in any client shape, a checkpoint made on one request point of its
    second half (a tail of a tenth to a half of its tokens), and a later request point."""
    api = draw(apis)
    elements = draw(richer(api, max_turns=6))
    points = request_points(elements) or [len(elements)]
    made_at = draw(st.sampled_from(points[len(points) // 2:]))
    made_on = entries_of(api, elements[:made_at])
    total = sum(map(measure, made_on))
    strategy = draw(st.sampled_from((PARTIAL, FULL)))
    cutoff = choose_cutoff(made_on, [measure(e) for e in made_on],
                           Thresholds(10**9, 10**9, draw(st.integers(total // 10, total // 2)), None, True),
                           strategy)
    if cutoff is None:
        return api, elements[:made_at], None
    made = build_event(made_on, ids_of(made_on), cutoff, "THE SUMMARY",
                       collect(made_on, cutoff, RestoreSettings(), count), strategy=strategy,
                       tokens_before=total, created_at=0.0, model="m", summarizer_model="m")
    made = CompactionEvent.from_data(orjson.loads(orjson.dumps(made.to_data())))  # as stored
    return api, elements[:draw(st.sampled_from([p for p in points if p >= made_at]))], made


@given(checkpointed())
def test_a_projection_rebuilt_for_any_client_shape_keeps_lead_latest_user_and_tail(case: tuple) -> None:
    """SPEC §1, §5: leading instructions + summary + restored + the client's tail, as sent."""
    api, elements, made = case
    if made is None:
        return
    client = entries_of(api, elements)
    rebuilt = rebuild(client, ids_of(client), made)
    assert rebuilt is not None, "a checkpoint was not applied to a list that extends its own"
    check_rebuilt(api, False, client, rebuilt)
