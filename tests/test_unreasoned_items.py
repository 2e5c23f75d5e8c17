"""The retry after OpenAI refuses an item whose reasoning item is not in the request
(`proxy.core.unreasoned`): the ids that name a missing reasoning item go, the items that cannot
go without theirs go whole with their outputs, the blobs made after them go, and the fake's rules
pass on what is left."""

from __future__ import annotations

from typing import Any

from proxy.compaction.overflow import RetryAction, private_state_rejection
from proxy.core.repair import repair
from proxy.core.sanitize import Policy, sanitize
from proxy.core.unreasoned import without_unreasoned_items
from proxy.testing.rules import check_responses
from proxy.testing.signing import DEFAULT_SIGNER as S
from tests.factories import (chat, r_assistant, r_call, r_output, r_reasoning, r_user, responses,
                             wire)
from tests.strategies import sign_encrypted

NONCE = "0123456789abcdef01234567"
LATER = "89abcdef0123456789abcdef"
THIRD = "456789abcdef0123456789ab"
SHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def _search(nonce: str = NONCE, index: int = 1) -> dict[str, Any]:
    return {"type": "web_search_call", "id": S.item_id("ws", nonce, index, reasoned=True),
            "status": "completed", "action": {"type": "search", "query": "aiohttp release"}}


def _message(text: str, nonce: str = NONCE, index: int = 2) -> dict[str, Any]:
    return r_assistant(text, id=S.item_id("msg", nonce, index, reasoned=True))


def _refusal(items: list[dict[str, Any]]) -> str | None:
    found = check_responses({"model": "m", "input": items}, signer=S,
                            verify_encrypted=S.encrypted_valid)
    return None if found is None else found.body["error"]["message"]


def test_the_refusal_buys_this_retry() -> None:
    refused = _refusal([r_user(), _search(), _message("Found it."), r_user("Thanks.")])
    assert refused is not None and "without its required 'reasoning' item" in refused
    retry = private_state_rejection(400, {"error": {"message": refused}})
    assert retry is not None and retry.action is RetryAction.DROP_UNREASONED


def test_the_refusal_names_the_item_as_it_spells_it() -> None:
    body = {"error": {"message": "Item 'ws_0A1b' of type 'web_search_call' was provided without "
                                 "its required 'reasoning' item: 'rs_0A1b'.",
                      "type": "invalid_request_error", "param": "input", "code": None}}
    retry = private_state_rejection(400, body)
    assert retry is not None and retry.items == ("ws_0A1b",)
    other = private_state_rejection(400, {"error": {"message": "Item 'rs_1' of type 'reasoning' "
                                                    "was provided without its required following "
                                                    "item."}})
    assert other is not None and other.items == ()  # no retry of that kind reads it


def test_the_named_item_goes_though_a_reasoning_item_comes_before_it() -> None:
    """A reasoning item between the search and the one its id names (no response sends two in
    a row): repair drops the first, unfollowed, and takes the second for the search's owner.
    Only the refusal can say which item to take out."""
    entries = responses(r_user(), r_reasoning(S.reasoning_id(NONCE), encrypted=None),
                        r_reasoning("rs_between", encrypted=None), _search(),
                        _message("Found it."), r_user("Next."))
    repaired = repair(entries).entries
    refused = _refusal(wire(repaired))
    assert refused is not None and _search()["id"] in refused
    assert without_unreasoned_items(repaired)[0] == repaired  # it has a reasoning item before it
    out, changed = without_unreasoned_items(repaired, named=(_search()["id"],))
    assert changed and not any(e.raw.get("type") == "web_search_call" for e in out)
    assert _refusal(wire(out)) is None


def test_a_search_without_its_reasoning_item_goes_and_the_message_loses_its_id() -> None:
    entries = responses(r_user("Look it up."), _search(), _message("Found it."), r_user("Thanks."))
    out, changed = without_unreasoned_items(entries)
    sent = wire(out)
    assert [i.get("type") for i in sent] == ["message"] * 3 and changed == 2
    assert "id" not in sent[1] and sent[1]["content"] == entries[2].raw["content"]
    assert out[0] is entries[0] and out[2] is entries[3]
    assert _refusal(sent) is None


def _retried(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As the proxy retries after the refusal of `items` (repaired): the strip's policy, then
    this fix, told the item the refusal named."""
    first = repair(responses(*items)).entries
    refused = _refusal(wire(first))
    retry = private_state_rejection(400, {"error": {"message": refused}}) if refused else None
    assert retry is not None and retry.action is RetryAction.DROP_UNREASONED, refused
    retried = sanitize(first, Policy.COMPACTED).entries
    return wire(without_unreasoned_items(retried, named=retry.items)[0])


def _reference(nonce: str) -> dict[str, Any]:
    return {"type": "item_reference", "id": S.reasoning_id(nonce)}


def test_the_rest_of_the_named_items_response_goes_with_it() -> None:
    """A store-on client echoes reasoning by reference, and one reference is missing: the rule
    sees a reference before both of the second step's items (the policy keeps references), and
    the refusal names only the first. The call after it came in the same response's output:
    on the old code it kept its id and the retry was refused for it in turn, on every later
    request too (a retry that fails teaches no lesson)."""
    items = [r_user("Fix it."), _reference(NONCE),
             r_call("read_file", "call_1", id=S.item_id("fc", NONCE, 1, reasoned=True)),
             r_output("call_1"), _search(LATER),
             r_call("edit", "call_2", id=S.item_id("fc", LATER, 2, reasoned=True)),
             r_output("call_2")]
    assert _search(LATER)["id"] in (_refusal(items) or "")
    sent = _retried(items)
    assert [i.get("type") for i in sent] == ["message", "item_reference", "function_call",
                                            "function_call_output", "function_call",
                                            "function_call_output"]
    assert sent[:4] == items[:4]  # the first step's ids stay
    assert "id" not in sent[4] and sent[4]["arguments"] == items[5]["arguments"]
    assert _refusal(sent) is None
    # A past turn the same: references are no blobs, the policy keeps them there too.
    past = _retried(items + [r_assistant("Done."), r_user("Thanks.")])
    assert past[:4] == items[:4] and "id" not in past[4] and _refusal(past) is None


def test_past_the_named_item_its_response_goes_on_after_outputs_up_to_a_reasoning_item() -> None:
    """A client that answers each call as it goes parts a response's calls by their outputs:
    the second call is the named one's too. A reference after them opens a response of its
    own, whose items keep their ids."""
    items = [r_user("Fix it."), _reference(NONCE),
             r_call("read_file", "call_1", id=S.item_id("fc", NONCE, 1, reasoned=True)),
             r_output("call_1"),
             r_call("grep", "call_2", id=S.item_id("fc", LATER, 1, reasoned=True)),
             r_output("call_2"),
             r_call("edit", "call_3", id=S.item_id("fc", LATER, 2, reasoned=True)),
             r_output("call_3"), _reference(THIRD),
             r_call("test", "call_4", id=S.item_id("fc", THIRD, 1, reasoned=True)),
             r_output("call_4")]
    sent = _retried(items)
    assert [i.get("id") for i in sent] == [None, items[1]["id"], items[2]["id"], None, None,
                                           None, None, None, items[8]["id"], items[9]["id"],
                                           None]
    assert _refusal(sent) is None


def test_a_named_item_right_after_a_reasoning_item_takes_only_what_follows_it() -> None:
    """Nothing says where the named item's response began when a reasoning item (or a
    reference) stands right before the run of items: those before the named one are taken
    for its own."""
    items = [r_user("Look it up."), _reference(NONCE), _search(), _search(LATER, 1),
             r_call("edit", "call_2", id=S.item_id("fc", LATER, 2, reasoned=True)),
             r_output("call_2")]
    assert _search(LATER, 1)["id"] in (_refusal(items) or "")
    sent = _retried(items)
    assert sent[:3] == items[:3] and [i.get("type") for i in sent[3:]] == [
        "function_call", "function_call_output"]
    assert "id" not in sent[3] and _refusal(sent) is None


def test_items_after_their_turns_reasoning_item_or_a_reference_stay_as_they_are() -> None:
    entries = responses(r_user(), r_reasoning(S.reasoning_id(NONCE), encrypted=None), _search(),
                        _message("Found it."), r_user("Next."),
                        {"type": "item_reference", "id": S.reasoning_id(LATER)},
                        _search(LATER), r_user("Go on."))
    out, changed = without_unreasoned_items(entries)
    assert out is entries and changed == 0


def test_a_computer_call_without_its_reasoning_goes_with_its_screenshot() -> None:
    call = {"type": "computer_call", "id": S.item_id("cu", NONCE, 1, reasoned=True),
            "call_id": "call_cu", "status": "completed", "pending_safety_checks": [],
            "action": {"type": "screenshot"}}
    entries = responses(r_user("Look at the screen."), call,
                        {"type": "computer_call_output", "call_id": "call_cu", "output": SHOT},
                        r_user("Now what?"))
    assert _refusal(wire(entries)) is not None
    out, _ = without_unreasoned_items(entries)
    assert [e.raw for e in out] == [entries[0].raw, entries[3].raw]


def test_a_call_that_shared_the_gone_items_output_gets_a_cancelled_one() -> None:
    shell = {"type": "local_shell_call", "id": S.item_id("lsh", NONCE, 1, reasoned=True),
             "call_id": "call_0", "status": "completed",
             "action": {"type": "exec", "command": ["ls"], "env": {}}}
    entries = responses(r_user(), r_call("read_file", "call_0"), shell,
                        {"type": "local_shell_call_output", "call_id": "call_0", "output": "a"},
                        r_user("Next."))
    out, _ = without_unreasoned_items(entries)
    sent = wire(out)
    assert [i.get("type") for i in sent] == ["message", "function_call", "function_call_output",
                                            "message"]
    assert repair(out).entries is out and _refusal(sent) is None


def test_the_current_loops_blobs_made_after_such_an_item_go() -> None:
    # The search the client kept goes: it was part of the history the loop's blob was made
    # over, so that blob would be refused next (the past turns' blobs go by the retry's policy).
    items = sign_encrypted([
        r_user("Look it up."), _search(), _message("Found it."), r_user("Now fix it."),
        r_reasoning("rs_loop"), r_call("edit", "call_e", id="fc_loop"), r_output("call_e")])
    refused = _refusal(items)
    assert refused is not None and "without its required 'reasoning' item" in refused
    out, _ = without_unreasoned_items(responses(*items))
    sent = wire(out)
    assert [i.get("type") for i in sent] == ["message", "message", "message", "function_call",
                                            "function_call_output"]
    assert "id" not in sent[3] and _refusal(sent) is None
    # Only the search and the id taken out, the loop's blob is refused.
    bare = [{k: v for k, v in i.items() if k != "id" or i["type"] != "message"}
            for i in items if i.get("type") != "web_search_call"]
    assert "could not be verified" in (_refusal(bare) or "")


def test_the_hostile_order_repair_cannot_mend_passes_on_the_retry() -> None:
    """A computer call never answered, then a message, then a search of its response: repair's
    note ends the call's step, the reasoning item before it goes, the search keeps its id."""
    call = {"type": "computer_call", "id": S.item_id("cu", NONCE, 1, reasoned=True),
            "call_id": "call_cu", "status": "completed", "pending_safety_checks": [],
            "action": {"type": "click", "x": 1, "y": 2, "button": "left"}}
    entries = responses(r_user("Open it."), r_reasoning(S.reasoning_id(NONCE), encrypted=None),
                        call, _message("Clicked?", index=2), _search(index=3), r_user("Stop."))
    first = wire(repair(entries).entries)
    assert "without its required 'reasoning' item" in (_refusal(first) or "")
    out, _ = without_unreasoned_items(repair(entries).entries)
    assert _refusal(wire(out)) is None


def test_chat_is_left_alone() -> None:
    entries = chat({"role": "user", "content": "hi"})
    assert without_unreasoned_items(entries) == (entries, 0)
