"""A thread's turns (`proxy/server/turns.py`): which failures a request that waited for the
thread's lock shares, by what the compaction it waited for was given."""

from __future__ import annotations

import asyncio

from proxy.server.turns import KEPT_FAILURES, Meanwhile, SharedFailure, ThreadTurn

SUMMARY_FAILED = SharedFailure("summarize", "summarizer overloaded", ("a",))
TOO_BIG = SharedFailure("post_check", "still over the trigger", ("a",))
# Decided before any summarizer call, by what the compaction was given: stage `summarize`.
TOO_MANY_CALLS = SharedFailure("summarize", "the summary would take 9 summarizer calls", ("a",),
                               by_inputs=True)


async def _waited(during: list) -> Meanwhile:
    """What a request that waited learns, when `during` happened while the lock was held."""
    turn = ThreadTurn()
    async with turn.take():
        waiter = asyncio.ensure_future(_take(turn))
        await asyncio.sleep(0)  # the waiter notes the count and waits
        assert turn.waiting == 1
        for happened in during:
            happened(turn)
    return await waiter


async def _take(turn: ThreadTurn) -> Meanwhile:
    async with turn.take() as meanwhile:
        return meanwhile


def _failed(failure: SharedFailure):
    return lambda turn: turn.failed(failure)


def test_a_summarizer_failure_is_shared_whatever_the_request() -> None:
    meanwhile = asyncio.run(_waited([_failed(SUMMARY_FAILED)]))
    assert meanwhile.shared(("b",)) == SUMMARY_FAILED


def test_a_post_check_failure_is_shared_only_with_the_same_inputs() -> None:
    meanwhile = asyncio.run(_waited([_failed(TOO_BIG)]))
    assert meanwhile.shared(("a",)) == TOO_BIG
    assert meanwhile.shared(("b",)) is None


def test_a_post_check_failure_does_not_hide_the_summary_failure_before_it() -> None:
    meanwhile = asyncio.run(_waited([_failed(SUMMARY_FAILED), _failed(TOO_BIG)]))
    assert meanwhile.shared(("a",)) == TOO_BIG
    assert meanwhile.shared(("b",)) == SUMMARY_FAILED


def test_a_cancellation_is_shared_by_no_one() -> None:
    meanwhile = asyncio.run(_waited([_failed(SharedFailure("cancelled", "the shutdown"))]))
    assert meanwhile.shared(("a",)) is None and meanwhile.failures == ()


def test_a_success_after_a_failure_leaves_nothing_to_share() -> None:
    """A compaction that succeeded after one that failed (an overflow's forced attempt): the
    summarizer works again, and a waiter that still needs a summary asks for its own."""
    meanwhile = asyncio.run(_waited([_failed(SUMMARY_FAILED), _failed(TOO_BIG),
                                     lambda turn: turn.succeeded()]))
    assert meanwhile.shared(("a",)) is None and meanwhile.shared(("b",)) is None


def test_a_failure_before_the_wait_is_not_shared() -> None:
    async def scenario() -> Meanwhile:
        turn = ThreadTurn()
        async with turn.take():
            turn.failed(SUMMARY_FAILED)
            waiter = asyncio.ensure_future(_take(turn))
            await asyncio.sleep(0)
        return await waiter

    assert asyncio.run(scenario()).shared(("a",)) is None


def test_a_waiter_cancelled_at_the_lock_leaves_it_to_the_holder_and_the_next() -> None:
    async def scenario() -> Meanwhile:
        turn = ThreadTurn()
        async with turn.take():
            gone = asyncio.ensure_future(_take(turn))
            after = asyncio.ensure_future(_take(turn))
            await asyncio.sleep(0)
            assert turn.waiting == 2
            gone.cancel()
            await asyncio.sleep(0)
            assert turn.waiting == 1 and turn.lock.locked()
            turn.failed(SUMMARY_FAILED)
        assert gone.cancelled()
        return await after

    assert asyncio.run(scenario()).shared(("b",)) == SUMMARY_FAILED


def test_without_the_summarizers_failures_a_post_check_failure_before_them_is_shared() -> None:
    """An attempt an overflow bought does not share a summarizer's failure: the post-check
    failure of its very request before it still stands."""
    meanwhile = asyncio.run(_waited([_failed(TOO_BIG), _failed(SUMMARY_FAILED)]))
    assert meanwhile.shared(("a",)) == SUMMARY_FAILED
    assert meanwhile.shared(("a",), summarizer=False) == TOO_BIG
    assert meanwhile.shared(("b",), summarizer=False) is None


def test_a_refusal_before_the_summarizer_is_shared_only_with_the_same_inputs() -> None:
    meanwhile = asyncio.run(_waited([_failed(TOO_MANY_CALLS)]))
    assert meanwhile.shared(("a",)) == TOO_MANY_CALLS
    assert meanwhile.shared(("b",)) is None
    # Whatever the breaker says since: the same inputs would be refused the same way.
    assert meanwhile.shared(("a",), summarizer=False) == TOO_MANY_CALLS


def test_a_refusal_before_the_summarizer_does_not_hide_the_summary_failure_before_it() -> None:
    meanwhile = asyncio.run(_waited([_failed(SUMMARY_FAILED), _failed(TOO_MANY_CALLS)]))
    assert meanwhile.shared(("a",)) == TOO_MANY_CALLS
    assert meanwhile.shared(("b",)) == SUMMARY_FAILED


def test_another_requests_refusal_does_not_hide_the_post_check_of_the_same_inputs() -> None:
    """A request's summary failed its post-check, then another request (another model) was
    refused before the summarizer: a retry of the first still shares its post-check."""
    other = SharedFailure("summarize", "the summary would take 9 summarizer calls", ("b",),
                          by_inputs=True)
    meanwhile = asyncio.run(_waited([_failed(TOO_BIG), _failed(other)]))
    assert meanwhile.shared(("a",)) == TOO_BIG
    assert meanwhile.shared(("b",)) == other
    assert meanwhile.shared(("c",)) is None


def test_a_failure_of_the_same_inputs_replaces_the_one_before() -> None:
    again = SharedFailure("post_check", "still over the trigger, again", ("a",))
    meanwhile = asyncio.run(_waited([_failed(TOO_BIG), _failed(again)]))
    assert meanwhile.failures == (again,)


def test_a_turn_keeps_a_bounded_number_of_failures() -> None:
    many = [SharedFailure("post_check", f"request {n}", (n,)) for n in range(3 * KEPT_FAILURES)]
    meanwhile = asyncio.run(_waited([_failed(SUMMARY_FAILED), *map(_failed, many)]))
    assert meanwhile.failures == (*reversed(many[-KEPT_FAILURES:]), SUMMARY_FAILED)
    assert meanwhile.shared((1,), summarizer=False) is None, "forgotten: its waiter runs its own"
    assert meanwhile.shared((1,)) == SUMMARY_FAILED, "the summarizer's failure is kept"
