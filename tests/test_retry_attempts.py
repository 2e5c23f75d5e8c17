"""Which attempt follows a rejection (`proxy.server.retry_attempts.after_rejection`), for a
plain first attempt and for one sent with a remembered lesson."""

from __future__ import annotations

import pytest

from proxy.compaction.overflow import Retry, RetryAction
from proxy.server.prepared import Attempt
from proxy.server.retry_attempts import MAX_NAMED, after_rejection, carried_on, fixed, further_fix
from proxy.testing import rejections

THINKING = rejections.anthropic("messages.3.content.0.type: Expected `thinking` or "
                                "`redacted_thinking`, but found `tool_use`.")
SIGNATURE = rejections.anthropic("messages.1.content.0: Invalid `signature` in `thinking` block")
OVERFLOW = rejections.openai("This model's maximum context length is 8192 tokens.",
                             code="context_length_exceeded")
STRIP = Retry(RetryAction.STRIP_BLOBS, "thinking signature rejected")


def _after(first: Attempt, rejection: rejections.Rejection, *, compacted: bool = False,
           status: int | None = None) -> tuple[Attempt | None, bool]:
    return after_rejection(first, status or rejection.status, rejection.body,
                           can_compact=True, compacted=compacted)


def test_a_plain_uncompacted_request_refused_for_its_loop_blocks_is_not_retried() -> None:
    assert _after(Attempt(), THINKING) == (None, False)
    attempt, refused = _after(Attempt(), THINKING, compacted=True)
    assert attempt is not None and attempt.keep_loop and not refused


def test_a_lesson_that_stripped_the_loop_blocks_is_forgotten_and_the_loop_sent_as_it_came() -> None:
    # The thread's upstream refused signatures once; the client's later blocks are its own,
    # and the strip sent at once took them from the loop: the retry sends the loop as it came.
    attempt, refused = _after(fixed(STRIP, lesson=True), THINKING)
    assert refused
    assert attempt is not None and attempt.keep_loop and attempt.policy is None
    assert not attempt.lesson and attempt.fix is not None and attempt.retry


def test_a_lesson_refused_for_its_own_kind_gets_no_retry() -> None:
    assert _after(fixed(STRIP, lesson=True), SIGNATURE) == (None, True)


@pytest.mark.parametrize(("status", "refused"), [(400, True), (404, True), (429, False),
                                                 (500, False), (503, False)])
def test_only_a_refusal_of_the_request_forgets_a_lesson(status: int, refused: bool) -> None:
    error = rejections.openai("Something else.", status=status)
    assert _after(fixed(STRIP, lesson=True), error)[1] is refused


def test_an_overflow_keeps_the_lesson_in_its_forced_retry() -> None:
    attempt, refused = _after(fixed(STRIP, lesson=True), OVERFLOW)
    assert not refused
    assert attempt is not None and attempt.forced and attempt.reason == "context_overflow"
    assert attempt.fix == STRIP and attempt.lesson
    plain, _ = _after(Attempt(), OVERFLOW)
    assert plain == Attempt(forced=True, reason="context_overflow")


def _unreasoned(item: str) -> rejections.Rejection:
    return rejections.openai(f"Item '{item}' of type 'function_call' was provided without its "
                             "required 'reasoning' item: 'rs_gone'.", param="input")


DROP_FC_A = Retry(RetryAction.DROP_UNREASONED, "item id refers to a dropped reasoning item",
                  ("fc_a",))


def test_a_lesson_refused_for_another_item_is_retried_naming_both() -> None:
    attempt, refused = _after(fixed(DROP_FC_A, lesson=True), _unreasoned("fc_b"))
    assert refused  # the lesson is forgotten: the retry that passes is learned instead
    assert attempt is not None and attempt.fix is not None and attempt.retry
    assert attempt.fix.items == ("fc_a", "fc_b")
    assert attempt.placeholders is not None
    named = attempt.placeholders.keywords  # type: ignore[attr-defined]
    assert named == {"named": ("fc_a", "fc_b")}


def test_a_lesson_refused_for_an_item_it_names_gets_no_retry() -> None:
    assert _after(fixed(DROP_FC_A, lesson=True), _unreasoned("fc_a")) == (None, True)


def test_carried_on_names_only_new_items_and_at_most_max_named() -> None:
    again = Retry(RetryAction.DROP_UNREASONED, "again", ("fc_b",))
    assert carried_on(DROP_FC_A, again) == Retry(RetryAction.DROP_UNREASONED, "again",
                                                 ("fc_a", "fc_b"))
    assert carried_on(DROP_FC_A, Retry(RetryAction.DROP_UNREASONED, "again", ("fc_a",))) is None
    assert carried_on(DROP_FC_A, Retry(RetryAction.DROP_UNREASONED, "no name")) is None
    full = Retry(RetryAction.DROP_UNREASONED, "full", tuple(f"fc_{n}" for n in range(MAX_NAMED)))
    assert carried_on(full, again) is None


def test_a_retry_refused_for_another_item_teaches_the_fix_naming_both() -> None:
    refused = _unreasoned("fc_b")
    assert further_fix(DROP_FC_A, refused.status, refused.body) == Retry(
        RetryAction.DROP_UNREASONED, "item id refers to a dropped reasoning item", ("fc_a", "fc_b"))
    same = _unreasoned("fc_a")
    assert further_fix(DROP_FC_A, same.status, same.body) is None
    assert further_fix(STRIP, refused.status, refused.body) is None  # another fix: the usual path
    assert further_fix(DROP_FC_A, OVERFLOW.status, OVERFLOW.body) is None
