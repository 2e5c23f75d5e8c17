"""Rebuilding a projection from a checkpoint, exercised on most examples (SPEC §1, §4, §5).

`test_compaction_apply.test_a_rebuilt_projection_ends_with_the_clients_last_entry` reaches a
rebuilt projection in about one example in six: its checkpoint is often never made (nothing to
summarize) and its later request is often a rewind. Here the checkpoint is made on a request
point in the second half of a conversation of either API (reasoning, parallel and custom calls,
images; a third of them damaged), with a tail budget that leaves something to summarize, and
the later request is mostly the same list or a longer one; a rewind now and then keeps the
other side in view. `--hypothesis-show-statistics` shows the share rebuilt (about 3 in 4).

On every rebuild: the projection ends with the client's latest entry; the leading
system/developer messages are the client's bytes; then come the summary and the restored
messages; then the kept tail, the client's bytes from the cut on, never starting with a tool
result. The latest user message is in that tail as sent, or its text is carried verbatim by the
restored messages. The cut separates no result from its call; a valid list gives a projection
valid for the upstream (tool adjacency by the fake's own rules). A later request that extends
the valid list the checkpoint was made on always gets the checkpoint (by id, or by index when
the event has no id for the cut).
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import event, given
from hypothesis import strategies as st

from proxy.compaction.apply import SUMMARY_HEADER, Rebuilt, build_event, rebuild
from proxy.compaction.cutoff import FULL, PARTIAL, choose_cutoff
from proxy.compaction.restore import collect
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Entries, Kind, content_text, latest_user_index, serialize
from proxy.core.boundary import is_safe_cut
from proxy.records import CompactionEvent
from proxy.settings import RestoreSettings
from proxy.testing.rules import check_chat, check_responses
from tests.factories import entries_of, measure, wire
from tests.strategies import conversations, request_points
from tests.test_compaction_support import count, ids_of


def _roundtrip(event_: CompactionEvent) -> CompactionEvent:
    """The event as the store gives it back."""
    return CompactionEvent.from_data(orjson.loads(orjson.dumps(event_.to_data())))


@st.composite
def checkpointed(draw: st.DrawFn, sound: bool = False,
                 summary: str = "THE SUMMARY") -> dict[str, Any]:
    """A conversation, a checkpoint made on one of its request points, and a later request.
    `sound`: no damaged results and no rewinds, the later request extends the list the
    checkpoint was made on (`cut`: the checkpoint's cut, None without one)."""
    api = draw(st.sampled_from(("chat", "responses")))
    # Results lost, duplicated, moved away.
    messy = False if sound else draw(st.sampled_from((False, False, True)))
    elements = draw(conversations(api, messy=messy, max_turns=6))
    points = request_points(elements) or [len(elements)]
    made_at = draw(st.sampled_from(points[len(points) // 2:]), "made on the first")
    made_on = entries_of(api, elements[:made_at])
    total = sum(map(measure, made_on))
    # A tail of a tenth to a half of the list: most checkpoints then summarize something.
    keep = draw(st.integers(total // 10, total // 2), "keep tokens")
    strategy = draw(st.sampled_from((PARTIAL, FULL)))
    cutoff = choose_cutoff(made_on, [measure(e) for e in made_on],
                           Thresholds(10**9, 10**9, keep, None, True), strategy)
    made: CompactionEvent | None = None
    if cutoff is not None:
        made = build_event(made_on, ids_of(made_on), cutoff, summary,
                           collect(made_on, cutoff, RestoreSettings(), count), strategy=strategy,
                           tokens_before=total, created_at=0.0, model="m", summarizer_model="m")
        if draw(st.integers(0, 3)) == 0:  # no id for the cut: the index decides
            made = CompactionEvent(**{**made.to_data(), "cutoff_message_id": None})
    # A rewind: an earlier request point, or the list that ends right before the cut (a
    # regenerated answer), which the checkpoint must not serve with the summary as its end.
    earlier = [p for p in points if p < made_at] + ([cutoff.index] if cutoff is not None else [])
    rewind = bool(earlier) and not sound and draw(st.sampled_from((False,) * 7 + (True,)))
    sent = draw(st.sampled_from(earlier if rewind else [p for p in points if p >= made_at]), "sent")
    return {"api": api, "messy": messy, "elements": elements, "made_at": made_at, "sent": sent,
            "event": made, "cut": cutoff.index if cutoff is not None else None}


def _check_valid(api: str, projection: Entries) -> None:
    body = wire(projection)
    found = check_chat({"messages": body}) if api == "chat" else check_responses({"input": body})
    assert found is None, found


def _check_no_orphan_made(client: Entries, rebuilt: Rebuilt) -> None:
    """A kept result whose call the client made before it still has that call before it."""
    projection, head, cut = rebuilt.projection, rebuilt.head, rebuilt.cut
    for k in range(head, len(projection)):
        entry = projection[k]
        if entry.kind is not Kind.RESULT:
            continue
        called = {c.id for e in client[:cut + k - head] for c in e.calls}
        kept = {c.id for e in projection[:k] for c in e.calls}
        assert entry.answers not in called or entry.answers in kept, \
            f"the cut separated {entry.answers} from its call"


def _check_rebuilt(api: str, messy: bool, client: Entries, rebuilt: Rebuilt) -> None:
    projection, lead, cut, head = rebuilt.projection, rebuilt.lead, rebuilt.cut, rebuilt.head
    assert projection[-1].to_bytes() == client[-1].to_bytes()
    assert [e.to_bytes() for e in projection[:lead]] == [e.to_bytes() for e in client[:lead]]
    assert all(e.kind is Kind.INSTRUCTION for e in projection[:lead])
    assert content_text(projection[lead]).startswith(SUMMARY_HEADER)
    assert all(e.kind is Kind.USER for e in projection[lead + 1:head])  # restored messages
    assert serialize(projection[head:]) == serialize(client[cut:])  # the kept tail, as sent
    assert is_safe_cut(client, cut) and client[cut].kind is not Kind.RESULT
    latest = latest_user_index(client)
    if latest is not None and latest >= cut:
        assert projection[head + latest - cut] is client[latest]
    elif latest is not None:  # summarized: restore carries it, whole
        event("the latest user message is summarized")
        # Right under its quote's header line, so a character lost at its start shows too.
        quoted = f" ---\n{content_text(client[latest])}"
        assert any(quoted in content_text(e) for e in projection[lead + 1:head]), \
            "the latest user message is lost"
    _check_no_orphan_made(client, rebuilt)
    if not messy:  # a damaged list stays damaged until the cascade's repair
        _check_valid(api, projection)


@given(checkpointed())
def test_a_rebuilt_projection_keeps_lead_latest_user_and_tail_and_stays_valid(case: dict[str, Any]) -> None:
    api, elements, made = case["api"], case["elements"], case["event"]
    if made is None:
        event("no checkpoint: nothing to summarize")
        return
    client = entries_of(api, elements[:case["sent"]])
    rebuilt = rebuild(client, ids_of(client), _roundtrip(made))
    if case["sent"] >= case["made_at"] and not case["messy"]:
        # The same list or a longer one: the checkpoint must apply, by the way it can. (A
        # damaged list may move a result across the cut later on: then it must not.)
        assert rebuilt is not None, "a checkpoint was not applied to a list that extends its own"
        assert rebuilt.found_by == ("id" if made.cutoff_message_id is not None else "index")
    if rebuilt is None:
        event("not rebuilt")
        return
    event(f"rebuilt (found by {rebuilt.found_by})")
    _check_rebuilt(api, case["messy"], client, rebuilt)
