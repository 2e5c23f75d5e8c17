"""The fake upstream's Responses rules, with OpenAI's exact texts, and encrypted reasoning."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.messages import item_call, item_output, item_user
from proxy.testing.rules import Rejection, check_responses
from proxy.testing.signing import DEFAULT_SIGNER, Signer

S = DEFAULT_SIGNER
NONCE = "0123456789abcdef01234567"


def body(*items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "input": list(items), **extra}


def error(rejection: Rejection | None, status: int = 400) -> dict[str, Any]:
    assert rejection is not None
    assert rejection.status == status
    return rejection.body["error"]


def reasoning(history: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": S.reasoning_id(NONCE), "summary": []}
    if history is not None:
        item["encrypted_content"] = S.encrypted_content(history, b"0123456789abcdef")
    return {**item, **extra}


def reasoned_call(call_id: str = "call_1") -> dict[str, Any]:
    return {**item_call(call_id), "id": S.item_id("fc", NONCE, 1, reasoned=True), "status": "completed"}


def verify(item: Any, preceding: Any) -> bool:
    return S.encrypted_valid(item, preceding)


def test_a_plain_conversation_passes() -> None:
    assert check_responses(body(item_user("hi"), item_call("c1"), item_output("c1"))) is None
    assert check_responses({"model": "m", "input": "just text"}) is None


def test_output_without_its_call() -> None:
    assert error(check_responses(body(item_user("hi"), item_output("call_x")))) == {
        "message": "No tool call found for function call output with call_id call_x.",
        "type": "invalid_request_error", "param": "input", "code": None}


def test_custom_and_generic_outputs_need_their_calls() -> None:
    custom = {"type": "custom_tool_call_output", "call_id": "call_c", "output": "ok"}
    assert error(check_responses(body(item_user("hi"), custom)))["message"] == (
        "No tool call found for custom tool call output with call_id call_c.")
    shell = {"type": "shell_call_output", "call_id": "call_s",
             "output": [{"stdout": "ok", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}
    assert "shell call output" in error(check_responses(body(item_user("hi"), shell)))["message"]


def test_call_without_output() -> None:
    assert error(check_responses(body(item_user("hi"), item_call("call_y"))))["message"] == (
        "No tool output found for function call call_y.")
    custom = {"type": "custom_tool_call", "call_id": "call_z", "name": "patch", "input": "x"}
    assert error(check_responses(body(item_user("hi"), custom)))["message"] == (
        "No tool output found for custom tool call call_z.")


def test_outputs_may_answer_calls_of_a_stored_response() -> None:
    prior = [item_user("hi"), item_call("call_p")]
    assert check_responses(body(item_output("call_p")), prior=prior) is None


def test_chat_style_tool_role() -> None:
    found = check_responses(body(item_user("hi"), {"role": "tool", "tool_call_id": "c", "content": "x"}))
    assert error(found) == {
        "message": "Invalid value: 'tool'. Supported values are: 'assistant', 'system', "
                   "'developer', and 'user'.",
        "type": "invalid_request_error", "param": "input[1]", "code": "invalid_value"}


def test_a_message_with_a_null_content_is_refused() -> None:
    found = check_responses(body(item_user("hi"), {"role": "assistant", "content": None}))
    assert error(found) == {
        "message": "Invalid type for 'input[1].content': expected one of an array of objects or "
                   "string, but got null instead.",
        "type": "invalid_request_error", "param": "input[1].content", "code": "invalid_type"}


def test_an_assistant_message_takes_output_parts_only() -> None:
    said = {"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hi."}, {"type": "input_text", "text": "x"}]}
    assert error(check_responses(body(item_user("hi"), said))) == {
        "message": "Invalid value: 'input_text'. Supported values are: 'output_text' and "
                   "'refusal'.",
        "type": "invalid_request_error", "param": "input[1].content[1]", "code": "invalid_value"}
    said["content"] = [{"type": "output_text", "text": "Hi."}, {"type": "refusal", "refusal": "No."}]
    assert check_responses(body(item_user("hi"), said)) is None
    assert check_responses(body(item_user("hi"), {"role": "assistant", "content": "Hi."})) is None


def test_unknown_item_key() -> None:
    assert error(check_responses(body(item_user("hi"), {**item_user("x"), "metadata": {}}))) == {
        "message": "Unknown parameter: 'input[1].metadata'.", "type": "invalid_request_error",
        "param": "input[1].metadata", "code": "unknown_parameter"}


def test_unknown_item_types_pass_through() -> None:
    assert check_responses(body(item_user("hi"), {"type": "web_search_call", "id": "ws_1",
                                                  "status": "completed", "action": {}})) is None


def test_reasoning_must_be_followed_by_what_it_produced() -> None:
    rs = reasoning()
    expected = f"Item '{rs['id']}' of type 'reasoning' was provided without its required following item."
    assert error(check_responses(body(item_user("hi"), rs)))["message"] == expected
    assert error(check_responses(body(item_user("hi"), rs, item_user("x"))))["message"] == expected
    fine = body(item_user("hi"), rs, reasoned_call(), item_output("call_1"))
    assert check_responses(fine) is None


def test_issued_ids_require_their_reasoning_item() -> None:
    call = reasoned_call()
    found = error(check_responses(body(item_user("hi"), call, item_output("call_1"))))
    assert found["message"] == (f"Item '{call['id']}' of type 'function_call' was provided without its "
                                f"required 'reasoning' item: '{S.reasoning_id(NONCE)}'.")
    message = {"type": "message", "role": "assistant", "id": S.item_id("msg", NONCE, 1, reasoned=True),
               "content": [{"type": "output_text", "text": "hi", "annotations": []}]}
    found = error(check_responses(body(item_user("x"), message)))
    assert "of type 'message' was provided without" in found["message"]


def test_ids_issued_without_reasoning_or_by_others_need_nothing() -> None:
    plain = {**item_call("call_1"), "id": S.item_id("fc", NONCE, 0, reasoned=False)}
    foreign = {**item_call("call_2"), "id": Signer(b"x").item_id("fc", NONCE, 0, reasoned=True)}
    sent = body(item_user("hi"), plain, item_output("call_1"), foreign, item_output("call_2"))
    assert check_responses(sent) is None


def test_store_false_reasoning_without_encrypted_content_is_a_404() -> None:
    rs = reasoning()
    sent = body(item_user("hi"), rs, reasoned_call(), item_output("call_1"), store=False)
    assert error(check_responses(sent), 404) == {
        "message": f"Item with id '{rs['id']}' not found. Items are not persisted when `store` is set "
                   "to false. Try again with `store` set to true, or remove this item from your input.",
        "type": "invalid_request_error", "param": "input", "code": None}
    assert check_responses({**sent, "store": True}) is None


def test_store_false_item_reference_is_a_404() -> None:
    sent = body(item_user("hi"), {"type": "item_reference", "id": "msg_1"}, store=False)
    assert check_responses(sent) is not None and check_responses(sent).status == 404  # type: ignore[union-attr]


# ---------------------------------------------------------------- encrypted reasoning

def test_exact_echo_of_encrypted_reasoning_passes() -> None:
    history = [item_user("read a.py")]
    sent = body(*history, reasoning(history), reasoned_call(), item_output("call_1", "contents"),
                store=False)
    assert check_responses(sent, verify_encrypted=verify) is None


def test_history_forms_that_say_the_same_thing_are_equal() -> None:
    issued_for = [{"role": "user", "content": "read a.py"}]
    sent = body(item_user("read a.py"), reasoning(issued_for), reasoned_call(),
                item_output("call_1"), store=False)
    assert check_responses(sent, verify_encrypted=verify) is None


@pytest.mark.parametrize("change", ["edit", "insert", "drop"])
def test_encrypted_reasoning_is_rejected_after_the_history_changed(change: str) -> None:
    history = [item_user("first"), {"type": "message", "role": "assistant",
                                    "content": [{"type": "output_text", "text": "ok"}]}, item_user("read")]
    rs = reasoning(history)
    changed = {"edit": [item_user("first"), history[1], item_user("read it")],
               "insert": [item_user("summary"), *history],
               "drop": history[1:]}[change]
    sent = body(*changed, rs, reasoned_call(), item_output("call_1"), store=False)
    assert error(check_responses(sent, verify_encrypted=verify)) == {
        "message": f"The encrypted content for item {rs['id']} could not be verified. Reason: "
                   "Encrypted content could not be decrypted or parsed.",
        "type": "invalid_request_error", "param": None, "code": "invalid_encrypted_content"}


@pytest.mark.parametrize("blob", ["gAAAAABnot-base64!!", "gAAAAAB", "something else"])
def test_tampered_or_foreign_blobs_are_rejected(blob: str) -> None:
    history = [item_user("hi")]
    tampered = {**reasoning(history), "encrypted_content": blob}
    sent = body(*history, tampered, reasoned_call(), item_output("call_1"), store=False)
    assert error(check_responses(sent, verify_encrypted=verify))["code"] == "invalid_encrypted_content"


def test_a_flipped_character_in_the_blob_is_rejected() -> None:
    history = [item_user("hi")]
    rs = reasoning(history)
    blob = rs["encrypted_content"]
    flipped = blob[:-3] + ("A" if blob[-3] != "A" else "B") + blob[-2:]
    sent = body(*history, {**rs, "encrypted_content": flipped}, reasoned_call(), item_output("call_1"))
    assert check_responses(sent, verify_encrypted=verify) is not None


def test_encrypted_content_without_id_uses_the_older_text() -> None:
    history = [item_user("hi")]
    rs = {k: v for k, v in reasoning(history).items() if k != "id"}
    sent = body(item_user("changed"), rs, item_call("call_1"), item_output("call_1"))
    found = error(check_responses(sent, verify_encrypted=verify))
    assert found["message"] == f"The encrypted content {rs['encrypted_content']} could not be verified."


def test_dropping_earlier_reasoning_items_keeps_later_ones_valid() -> None:
    turn1 = [item_user("one")]
    rs1 = {**reasoning(turn1), "id": S.reasoning_id("a" * 24)}
    call1 = {**item_call("call_1"), "id": S.item_id("fc", "a" * 24, 1, reasoned=True)}
    turn2 = [*turn1, rs1, call1, item_output("call_1"), item_user("two")]
    rs2 = reasoning(turn2)
    full = body(*turn2, rs2, reasoned_call("call_2"), item_output("call_2"), store=False)
    assert check_responses(full, verify_encrypted=verify) is None
    # A client dropping the earlier reasoning item must also drop the `fc_` id it required.
    call1_plain = item_call("call_1")
    dropped = body(turn1[0], call1_plain, item_output("call_1"), item_user("two"), rs2,
                   reasoned_call("call_2"), item_output("call_2"), store=False)
    assert check_responses(dropped, verify_encrypted=verify) is None


def test_without_a_verifier_encrypted_content_is_not_checked() -> None:
    sent = body(item_user("x"), {**reasoning(), "encrypted_content": "gAAAAABzzz"}, reasoned_call(),
                item_output("call_1"))
    assert check_responses(sent) is None


def prefix_error(i: int, item_id: str, prefix: str) -> dict[str, Any]:
    return {"message": f"Invalid 'input[{i}].id': '{item_id}'. Expected an ID that begins with "
                       f"'{prefix}'.", "type": "invalid_request_error", "param": f"input[{i}].id",
            "code": "invalid_id_prefix"}


def test_a_function_call_id_must_begin_with_fc() -> None:
    chat_style = {**item_call("call_1"), "id": "call_1"}
    assert error(check_responses(body(item_user("hi"), chat_style, item_output("call_1")))) == (
        prefix_error(1, "call_1", "fc"))
    issued = {**item_call("call_1"), "id": "fc_0123"}
    assert check_responses(body(item_user("hi"), issued, item_output("call_1"))) is None


def test_reasoning_and_message_ids_must_begin_with_their_prefix() -> None:
    foreign = {"type": "reasoning", "id": "item_abc", "summary": []}
    answer = {"type": "message", "role": "assistant", "content": "Hi."}
    assert error(check_responses(body(item_user("hi"), foreign, answer))) == (
        prefix_error(1, "item_abc", "rs"))
    assert error(check_responses(body(item_user("hi"), {**answer, "id": "rs_1"}))) == (
        prefix_error(1, "rs_1", "msg"))
    assert check_responses(body(item_user("hi"), {**foreign, "id": "rs_1"},
                                {**answer, "id": "msg_1"})) is None


@pytest.mark.parametrize(("item", "got"), [("hi", "a string"), (7, "an integer"), (None, "null")])
def test_an_item_of_another_type_is_named_by_its_type(item: Any, got: str) -> None:
    assert error(check_responses(body(item_user("hi"), item))) == {
        "message": f"Invalid type for 'input[1]': expected an object, but got {got} instead.",
        "type": "invalid_request_error", "param": "input[1]", "code": "invalid_type"}
