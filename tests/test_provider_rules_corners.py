"""Projections the fake upstream (PROTOCOL.md §2) accepts, in the corners the strategies miss.

Each case is a list the fake accepts as the client sent it (or a damaged one repair must fix),
and the proxy's output must pass the same rules.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.compaction.transcript import render_blocks
from proxy.conversation import content_text
from proxy.core.cascade import run_cascade
from proxy.core.microcompact import CLEARED_TEXT, microcompact
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.settings import CompactionSettings, MicrocompactSettings, RestoreSettings
from proxy.testing.reference_tokens import count_text
from proxy.testing.rules import check_responses
from tests.factories import (assistant_calls, call, chat, r_assistant, r_call, r_output, r_user, read,
                             responses, stage_context, tool_result, user, wire)
from tests.strategies import SIGNER, cascade_contexts, conversations


def test_a_responses_call_id_used_again_in_a_later_turn_keeps_both_answers() -> None:
    """Responses pairs by `call_id` (PROTOCOL.md §2.3): a server that numbers its calls per
    response (`call_0` every turn) sends valid lists; the later answer is not a duplicate."""
    items = [r_user("a"), r_call("read_file", "call_0", {"path": "a"}), r_output("call_0", "A"),
             r_assistant("ok"), r_user("b"), r_call("read_file", "call_0", {"path": "b"}),
             r_output("call_0", "B")]
    assert check_responses({"input": items}) is None
    entries = responses(*items)
    out = repair(entries)
    assert out.entries == entries and out.changed == 0
    assert check_responses({"input": wire(out.entries)}) is None


def test_a_reused_call_id_left_unanswered_gets_its_own_cancelled_result() -> None:
    items = [r_user("a"), r_call("read_file", "call_0"), r_output("call_0", "A"), r_user("b"),
             r_call("read_file", "call_0"), r_user("stop")]
    out = repair(responses(*items))
    body = wire(out.entries)
    assert check_responses({"input": body}) is None
    assert out.cancelled == 1 and out.dropped_results == 0
    assert content_text(out.entries[5]) == CANCELLED_TEXT and body[5]["call_id"] == "call_0"


def _numbered_per_turn(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with call ids `call_0`, `call_1`, ... counted afresh after each user message."""
    out, names, n = [], {}, 0
    for item in items:
        if item.get("role") == "user":
            names, n = {}, 0
        if isinstance(item.get("call_id"), str):
            if item["call_id"] not in names:
                names[item["call_id"]], n = f"call_{n}", n + 1
            item = {**item, "call_id": names[item["call_id"]]}
        out.append(item)
    return out


@given(conversations("responses"), st.data())
def test_call_ids_numbered_per_turn_pass_repair_and_the_cascade_untouched(
        items: list[dict[str, Any]], data: st.DataObject) -> None:
    items = _numbered_per_turn(items)
    assert check_responses({"input": items}) is None
    entries = responses(*items)
    assert repair(entries).entries is entries
    context = data.draw(cascade_contexts(len(items), compaction=True))
    body = wire(run_cascade(entries, replace(context, keep_loop=False)).entries)
    assert check_responses({"input": body}) is None


# ---------------------------------------------------------------- results paired by position

def test_restore_reads_each_file_from_its_own_result_when_call_ids_repeat() -> None:
    """Chat pairs by adjacency and Responses by order (PROTOCOL.md §2.1, §2.3), so an id may
    come back in a later turn; the file restored under a path is what that path's call read."""
    elements = [user("go"), assistant_calls(read("call_0", "a.py")), tool_result("call_0", "text of a"),
                user("next"), assistant_calls(read("call_0", "b.py")), tool_result("call_0", "text of b"),
                user("tail")]
    entries = chat(*elements)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(), count_text)
    files = dict(zip(restored.file_paths, (m["content"] for m in restored.files), strict=True))
    assert "text of a" in files["a.py"] and "text of b" not in files["a.py"]
    assert "text of b" in files["b.py"]


def test_the_transcript_names_the_tool_each_result_answers_when_call_ids_repeat() -> None:
    elements = [user("go"), assistant_calls(call("read_file", "call_0")), tool_result("call_0", "A"),
                user("next"), assistant_calls(call("bash", "call_0")), tool_result("call_0", "B")]
    entries = chat(*elements)
    blocks = render_blocks(entries, range(len(entries)), count_text, lambda e: 10)
    texts = [b.text for b in blocks]
    assert texts[2].startswith("[result of tool read_file (call call_0)]")
    assert texts[5].startswith("[result of tool bash (call call_0)]")


def test_microcompact_judges_each_result_by_the_call_it_answers_when_call_ids_repeat() -> None:
    """Only `read_file` results are compactable here: the first call_0 read a file, the later
    call_0 (another turn) ran a command; each result goes by its own call."""
    entries = chat(user("go"), assistant_calls(read("call_0", "a.py")), tool_result("call_0", "a " * 200),
                   user("next"), assistant_calls(call("bash", "call_0")), tool_result("call_0", "b " * 200),
                   user("more"))
    settings = CompactionSettings(microcompact=MicrocompactSettings(keep_recent=0, tools=("read_file",)))
    out = microcompact(entries, stage_context(entries, tail=1, settings=settings, now=7 * 3600.0,
                                              last_activity=0.0))
    assert [i for i, e in enumerate(out.entries) if content_text(e) == CLEARED_TEXT] == [2]


# ---------------------------------------------------------------- the fake upstream's rules

def test_the_fake_takes_a_reasoning_item_by_reference_as_present() -> None:
    """With `store` on, an `item_reference` stands for the stored item (PROTOCOL.md §6.2): an
    item id issued next to that reasoning item does not need it sent again in full."""
    nonce = "0" * 24
    reasoning_id = SIGNER.reasoning_id(nonce)
    issued = SIGNER.item_id("fc", nonce, 1, reasoned=True)
    items = [r_user("go"), {"type": "item_reference", "id": reasoning_id},
             r_call("read_file", "call_1", id=issued), r_output("call_1")]
    assert check_responses({"input": items}) is None
    found = check_responses({"input": [items[0], *items[2:]]})
    assert found is not None and "without its required 'reasoning' item" in found.body["error"]["message"]
