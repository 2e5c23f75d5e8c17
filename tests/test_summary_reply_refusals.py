"""Reading a summarizer's 200 that refuses or holds no summary (`summary_reply.read_reply`): a
refusal wins over any text beside it, and no reason quotes the upstream's own words."""

from __future__ import annotations

from proxy.compaction import postcheck
from proxy.compaction.summary_reply import MODEL_REFUSAL, read_reply
from proxy.conversation import Api

SUMMARY = "## Facts to keep\n- FACT: the port is 8443"


def _chat(message: dict, finish: object = "stop") -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish}]}


def _response(*parts: dict, status: str = "completed", **extra: object) -> dict:
    return {"status": status, "output": [{"type": "message", "content": list(parts)}], **extra}


def test_a_refusal_beside_text_is_a_refusal_and_keeps_none_of_it() -> None:
    chat = [_chat({"content": SUMMARY, "refusal": "I won't."}),
            _chat({"content": [{"type": "text", "text": SUMMARY},
                               {"type": "refusal", "refusal": "I won't."}]})]
    responses = _response({"type": "output_text", "text": SUMMARY},
                          {"type": "refusal", "refusal": "I won't."})
    for reply in [*(read_reply(Api.CHAT, doc) for doc in chat),
                  read_reply(Api.RESPONSES, responses)]:
        assert (reply.refused, reply.text) == (MODEL_REFUSAL, "")
        verdict = postcheck.check_reply(reply)
        assert not verdict.ok and "won't" not in verdict.reason


def test_a_filtered_answer_keeps_none_of_its_partial_text() -> None:
    chat = read_reply(Api.CHAT, _chat({"content": SUMMARY}, "content_filter"))
    responses = read_reply(Api.RESPONSES, _response(
        {"type": "output_text", "text": SUMMARY}, status="incomplete",
        incomplete_details={"reason": "content_filter"}))
    assert (chat.refused, chat.text, chat.said) == ("content_filter", "",
                                                    "finish_reason: content_filter")
    assert (responses.refused, responses.text) == ("content_filter", "")
    assert responses.said == "status: incomplete, incomplete_details.reason: content_filter"


def test_a_content_policys_error_in_a_200_is_a_refusal_any_other_is_unreadable() -> None:
    failed = {"status": "failed", "output": [],
              "error": {"code": "invalid_prompt", "message": "flagged: the words"}}
    reply = read_reply(Api.RESPONSES, failed)
    assert (reply.refused, reply.said) == ("invalid_prompt",
                                           "status: failed, error.code: invalid_prompt")
    other = read_reply(Api.RESPONSES, {**failed, "error": {"code": "server_error"}})
    assert other.refused is None
    assert postcheck.check_reply(other).reason == (
        "the summarizer's answer could not be read (status: failed, an error object)")
    assert read_reply(Api.CHAT, {"error": {"code": ["content_filter"]}}).refused is None


def test_an_unfinished_answer_with_all_its_text_is_no_summary() -> None:
    for status in ("in_progress", "queued", "cancelled", "incomplete"):
        reply = read_reply(Api.RESPONSES, _response({"type": "output_text", "text": SUMMARY},
                                                    status=status))
        assert not postcheck.check_reply(reply).ok, status
    odd = read_reply(Api.RESPONSES, _response({"type": "output_text", "text": SUMMARY},
                                              status="a status\nwith words " * 3))
    assert "words" not in postcheck.check_reply(odd).reason
    # An upstream that leaves the status out (or null) answered in full.
    assert postcheck.check_reply(read_reply(Api.RESPONSES, {
        "status": None, "output": [{"type": "message",
                                    "content": [{"type": "output_text", "text": SUMMARY}]}]})).ok


def test_a_tool_call_beside_text_is_no_summary() -> None:
    reply = read_reply(Api.CHAT, _chat({"content": "Let me look.", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        "tool_calls"))
    assert reply.held == "a tool call" and not postcheck.check_reply(reply).ok
    assert postcheck.check_reply(read_reply(Api.CHAT, _chat({"content": SUMMARY}, None))).ok
