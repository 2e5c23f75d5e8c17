"""A stale summary is never applied to a changed prefix, as properties (SPEC §5 "Rebuild").

On every request the checkpoint is rebuilt onto the client's list: the boundary is found by
`cutoff_message_id`, else by `cutoff_index`, and the prefix digest is checked: "if the client
changed the summarized part (an edit, a branch), the stale summary is not applied to it".

`test_properties_rebuild.py` only sends lists that extend (or rewind) the one the checkpoint
was made on, so a `rebuild` that skipped the prefix digest check (mutation M22 of the audit)
passed it: the cut is still found by its id and is still a safe cut. Here a checkpoint is made
for a valid conversation of either API, then one message of the summarized part (after the
leading system/developer messages, before the cut) is edited, inserted or deleted: the old
summary must not come back. Editing only the kept tail, past the cut, changes nothing the
summary stands for: the checkpoint still applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import assume, event, given
from hypothesis import strategies as st

from proxy.compaction.apply import rebuild
from proxy.conversation import content_text, leading_instructions
from proxy.records import CompactionEvent
from tests.factories import entries_of
from tests.test_compaction_support import ids_of
from tests.test_properties_rebuild import checkpointed as made_checkpoint

Wire = dict[str, Any]

# Unique enough to tell the checkpoint's summary from anything a conversation says.
SUMMARY_TEXT = "THE STALE SUMMARY 7f3a"
EDIT_MARK = " [edited by the client]"


@dataclass(frozen=True)
class Checkpointed:
    """A valid conversation sent up to `sent`, and a checkpoint that applies to it."""

    api: str
    sent: list[Wire]
    checkpoint: CompactionEvent
    lead: int  # leading system/developer messages of `sent`
    cut: int  # the checkpoint's cut in `sent`


def _roundtrip(made: CompactionEvent) -> CompactionEvent:
    """The event as the store gives it back."""
    return CompactionEvent.from_data(orjson.loads(orjson.dumps(made.to_data())))


def _summary_applied(api: str, elements: list[Wire], checkpoint: CompactionEvent) -> bool:
    client = entries_of(api, elements)
    rebuilt = rebuild(client, ids_of(client), checkpoint)
    return rebuilt is not None and any(SUMMARY_TEXT in content_text(e) for e in rebuilt.projection)


@st.composite
def checkpointed(draw: st.DrawFn) -> Checkpointed:
    """`test_properties_rebuild.checkpointed`, sound: the later request extends the list the
    checkpoint was made on, so the checkpoint applies to it as sent."""
    drawn = draw(made_checkpoint(sound=True, summary=SUMMARY_TEXT))
    assume(drawn["event"] is not None)  # nothing to summarize: no checkpoint
    api, sent = drawn["api"], drawn["elements"][:drawn["sent"]]
    return Checkpointed(api, sent, _roundtrip(drawn["event"]),
                        leading_instructions(entries_of(api, sent)), drawn["cut"])


def _editable(api: str, element: Wire) -> bool:
    """A message whose words a client can change: not a reasoning item, a server tool's item,
    a Responses compaction item, nor a bare call."""
    if api == "chat":
        return True
    return element.get("type", "message") == "message" or element.get("type", "").endswith("_output")


def _edited(api: str, element: Wire, keep_id: bool) -> Wire:
    """The element with its text changed. A Responses item the client changed is its own: the
    server `id` goes (an item with an id is known by it alone, SPEC §3) unless `keep_id`."""
    out = dict(element)
    if api == "chat":
        content = out.get("content")
        if isinstance(content, list):
            out["content"] = [*content, {"type": "text", "text": EDIT_MARK}]
        else:
            out["content"] = (content or "") + EDIT_MARK
        return out
    if not keep_id:
        out.pop("id", None)
    field = "content" if out.get("type", "message") == "message" else "output"
    value = out.get(field)
    if isinstance(value, list):
        kind = "output_text" if out.get("role") == "assistant" else "input_text"
        out[field] = [*value, {"type": kind, "text": EDIT_MARK}]
    else:
        out[field] = (value or "") + EDIT_MARK
    return out


def _inserted(api: str) -> Wire:
    text = "An inserted message the summary never saw."
    if api == "chat":
        return {"role": "user", "content": text}
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@given(checkpointed(), st.data())
def test_a_changed_summarized_prefix_never_gets_the_stale_summary(
        case: Checkpointed, data: st.DataObject) -> None:
    api, sent, lead, cut = case.api, case.sent, case.lead, case.cut
    assert _summary_applied(api, sent, case.checkpoint), "the checkpoint does not apply as sent"
    editable = [i for i in range(lead, cut) if _editable(api, sent[i])]
    change = data.draw(st.sampled_from(("edit", "insert", "delete") if editable else ("insert", "delete")),
                       "change")
    changed = list(sent)
    if change == "edit":
        at = data.draw(st.sampled_from(editable), "edited")
        changed[at] = _edited(api, sent[at], keep_id=False)
    elif change == "insert":
        # Before a summarized message: one inserted right before the cut message, by an
        # index-found cut, is the tail's first message and the summarized part is unchanged.
        at = data.draw(st.integers(lead, cut - 1), "inserted before")
        changed.insert(at, _inserted(api))
    else:
        at = data.draw(st.integers(lead, cut - 1), "deleted")
        del changed[at]
    event(f"{change} in the summarized part")
    assert not _summary_applied(api, changed, case.checkpoint), \
        f"the stale summary was applied after an {change} at {at} (summarized part {lead}..{cut})"


@given(checkpointed(), st.data())
def test_an_edit_past_the_cut_keeps_the_summary(case: Checkpointed, data: st.DataObject) -> None:
    api, sent, cut = case.api, case.sent, case.cut
    # Past the cut, not on it: an edited cut message whose words a later message repeats would
    # hand its id (occurrence counter, SPEC §3) to that later one.
    editable = [i for i in range(cut + 1, len(sent)) if _editable(api, sent[i])]
    if not editable:
        event("nothing past the cut to edit")
        return
    at = data.draw(st.sampled_from(editable), "edited")
    changed = list(sent)
    changed[at] = _edited(api, sent[at], keep_id=True)
    assert _summary_applied(api, changed, case.checkpoint), \
        f"an edit at {at}, in the kept tail past the cut {cut}, dropped the checkpoint"
