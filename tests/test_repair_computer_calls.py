"""An interrupted Responses `computer_call` (no screenshot came back, the client moved on).

OpenAI refuses it ("No tool output found for computer call call_...", seen by several
computer-use clients), and a made output would have to invent a screenshot: repair takes the
call out and leaves an assistant note at the end of its step (where a cancelled output would
go) that names the action and its unacknowledged safety checks and claims no outcome; the
reasoning item that would be left right before the note goes too.
"""

from __future__ import annotations

from typing import Any

from proxy.conversation import Kind, content_text
from proxy.core.computer_calls import NOTE_OPENING, interrupted_computer_note
from proxy.core.repair import repair
from proxy.testing.rules import check_responses
from tests.factories import r_assistant, r_call, r_developer, r_output, r_reasoning, r_user, responses, wire

SHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def _computer(call_id: str = "call_cu", action: Any = None, **extra: Any) -> dict[str, Any]:
    return {"type": "computer_call", "id": f"cu_{call_id}", "call_id": call_id, "status": "completed",
            "action": action or {"type": "click", "x": 120, "y": 48, "button": "left"},
            "pending_safety_checks": [], **extra}


def _screenshot(call_id: str = "call_cu") -> dict[str, Any]:
    return {"type": "computer_call_output", "call_id": call_id, "output": SHOT}


def _unanswered_computer_calls(items: list[dict[str, Any]]) -> list[str]:
    """OpenAI's rule: every computer_call has a computer_call_output after it."""
    open_ids = []
    for item in items:
        if item.get("type") == "computer_call":
            open_ids.append(item["call_id"])
        elif item.get("type") == "computer_call_output" and item["call_id"] in open_ids:
            open_ids.remove(item["call_id"])
    return open_ids


def test_an_interrupted_computer_call_becomes_a_note() -> None:
    entries = responses(r_developer(), r_user("Open the settings."), r_reasoning("rs_1"),
                        _computer(), r_user("Stop, do something else."))
    refused = check_responses({"model": "m", "input": wire(entries)})
    assert refused is not None
    assert "No tool output found for computer call call_cu." in refused.body["error"]["message"]
    out = repair(entries)
    sent = wire(out.entries)
    assert _unanswered_computer_calls(sent) == []
    assert [e.get("type") for e in sent] == ["message"] * 4  # the reasoning item went with its call
    note = out.entries[2]
    assert note.kind is Kind.ASSISTANT and out.origins == (0, 1, None, 4)
    assert content_text(note).startswith(NOTE_OPENING)
    assert 'click x=120 y=48 button="left"' in content_text(note)
    assert "unknown" in content_text(note) and "screenshot" in content_text(note)
    assert out.entries[3] is entries[4] and out.entries[0] is entries[0]
    assert out.dropped_calls == 1 and out.dropped_reasoning == 1 and out.changed == 2
    assert check_responses({"model": "m", "input": sent}) is None


def test_an_answered_computer_call_is_left_as_it_is() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), _computer(), _screenshot(), r_user("Next."))
    out = repair(entries)
    assert out.entries is entries and out.changed == 0


def test_a_computer_call_an_item_reference_may_answer_stays() -> None:
    """A screenshot the client sends by reference to the stored item is unseen here."""
    entries = responses(r_user(), _computer(), {"type": "item_reference", "id": "cuo_1"},
                        r_user("Next."))
    assert repair(entries).entries is entries


def test_a_reasoning_item_not_right_before_the_call_stays() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_assistant("Clicking.", id="msg_1"),
                        _computer(), r_user("Stop."))
    out = repair(entries)
    assert [e.get("type") for e in wire(out.entries)] == ["message", "reasoning", "message",
                                                         "message", "message"]
    assert out.entries[2] is entries[2] and out.dropped_reasoning == 0


def test_later_items_of_the_turn_lose_the_server_id_naming_the_dropped_reasoning() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), _computer(), r_assistant("Done?", id="msg_1"),
                        r_user("Stop."))
    sent = wire(repair(entries).entries)
    assert "id" not in sent[2] and sent[2]["content"] == entries[3].raw["content"]


def test_a_later_steps_answered_call_stays_when_the_reasoning_before_the_note_goes() -> None:
    # The note ends its step as a screenshot would: the answered call after it belongs to a
    # later response, not to the reasoning item dropped before the note. Found by
    # test_properties_repair, which saw the pair dropped with it.
    entries = responses(r_user(), r_reasoning("rs_1"), _computer("call_a"),
                        r_output("call_orphan", custom=True), _computer("call_b"),
                        _screenshot("call_b"))
    out = repair(entries)
    sent = wire(out.entries)
    assert [e.get("type") for e in sent] == ["message", "message", "computer_call",
                                            "computer_call_output"]
    assert sent[2] == entries[4].raw and sent[3] == entries[5].raw
    assert out.origins == (0, None, 4, 5)
    assert out.dropped_reasoning == 1 and out.dropped_items == 0 and out.dropped_calls == 1
    assert check_responses({"model": "m", "input": sent}) is None


def test_the_pending_safety_checks_are_named_in_the_note() -> None:
    checks = [{"id": "cu_sc_1", "code": "malicious_instructions", "message": "Ignore it."},
              {"id": "cu_sc_2", "code": "irrelevant_domain", "message": "Elsewhere."}]
    entries = responses(r_user(), _computer(pending_safety_checks=checks), r_user("Stop."))
    text = content_text(repair(entries).entries[1])
    assert '2 pending safety check(s), never acknowledged: "malicious_instructions", ' \
           '"irrelevant_domain"' in text


def test_a_function_call_of_the_same_step_keeps_its_cancelled_output() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), r_call("read_file", "call_f"), _computer(),
                        r_user("Stop."))
    out = repair(entries)
    sent = wire(out.entries)
    assert [e.get("type") for e in sent] == ["message", "reasoning", "function_call",
                                            "function_call_output", "message", "message"]
    assert out.cancelled == 1 and out.dropped_calls == 1 and out.dropped_reasoning == 0
    assert check_responses({"model": "m", "input": sent}) is None


def test_an_answered_call_of_the_same_step_keeps_its_reasoning_item_and_screenshot() -> None:
    entries = responses(r_user(), r_reasoning("rs_1"), _computer("call_a"), _computer("call_b"),
                        _screenshot("call_b"), r_user("Stop."))
    out = repair(entries)
    sent = wire(out.entries)
    assert [e.get("type") for e in sent] == ["message", "reasoning", "computer_call",
                                            "computer_call_output", "message", "message"]
    assert sent[2] == entries[3].raw and content_text(out.entries[4]).startswith(NOTE_OPENING)
    assert out.dropped_reasoning == 0 and out.dropped_items == 0 and out.dropped_calls == 1
    assert _unanswered_computer_calls(sent) == []
    assert check_responses({"model": "m", "input": sent}) is None


def test_a_batched_actions_list_is_named_in_short() -> None:
    actions = [{"type": "type", "text": "x" * 500}, {"type": "keypress", "keys": ["CTRL", "A"]},
               *({"type": "wait"} for _ in range(5))]
    text = interrupted_computer_note({"type": "computer_call", "call_id": "c", "actions": actions})
    assert len(text) < 400 and "x" * 41 not in text
    assert 'type text="' in text and 'keypress keys=["CTRL","A"]' in text and "3 more" in text
    assert text.endswith("]") and "\n" not in text


def test_a_hostile_action_still_gives_a_one_line_note() -> None:
    odd = {"type": ["not", "a", "name"], "text": "line one\nline two]", "": None, "n": float("nan")}
    text = interrupted_computer_note({"type": "computer_call", "call_id": "c", "action": odd,
                                      "pending_safety_checks": [7, {"code": {"a": 1}}]})
    assert "\n" not in text and text.count("]") >= 1 and text.startswith(NOTE_OPENING)
    assert interrupted_computer_note({"type": "computer_call"}).startswith(NOTE_OPENING)


def test_the_same_input_gives_the_same_note_bytes() -> None:
    def build() -> bytes:
        entries = responses(r_user(), r_reasoning("rs_1"), _computer(), r_user("Stop."),
                            r_call("ls", "call_l"), r_output("call_l"))
        return b"".join(e.to_bytes() for e in repair(entries).entries)
    assert build() == build()


def test_the_note_goes_after_a_server_item_that_follows_its_call() -> None:
    """A response that ran a web search after handing the client a computer call: the note
    goes after the search, so the search stays behind the reasoning item its id names (before
    it, the note parted them, and the reasoning item went while the search kept its id)."""
    from proxy.testing.signing import DEFAULT_SIGNER as S
    nonce = "0123456789abcdef01234567"
    search = {"type": "web_search_call", "id": S.item_id("ws", nonce, 2, reasoned=True),
              "status": "completed", "action": {"type": "search", "query": "settings page"}}
    entries = responses(r_user("Open the settings."), r_reasoning(S.reasoning_id(nonce)),
                        _computer(id=S.item_id("cu", nonce, 1, reasoned=True)), search,
                        r_user("Stop, do something else."))
    out = repair(entries)
    sent = wire(out.entries)
    assert [e.get("type") for e in sent] == ["message", "reasoning", "web_search_call", "message",
                                            "message"]
    assert sent[2] == search and content_text(out.entries[3]).startswith(NOTE_OPENING)
    assert out.origins == (0, 1, 3, None, 4)
    assert out.dropped_calls == 1 and out.dropped_reasoning == 0 and out.dropped_items == 0
    assert check_responses({"model": "m", "input": sent}) is None
