"""What a thread learns from a retry that passed (`proxy.server.retry_lessons`): kept per
tenant, thread and model, and forgotten when the fix sent at once is refused in turn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.overflow import Retry, RetryAction
from proxy.records import ThreadKey
from proxy.server.retry_lessons import RetryLessons
from proxy.testing import rejections
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.test_retry_lessons_sessions import _dropped_reasoning
from tests.tool_loop_client import ToolLoopClient

PLACEHOLDERS = Retry(RetryAction.REASONING_PLACEHOLDERS, "reasoning_content required in the tool loop")
MUST_PASS_BACK = "The `reasoning_content` in the thinking mode must be passed back to the API."


def _deepseek(make_fake, make_proxy):
    fake = make_fake(dialect="deepseek-thinking")
    return fake, make_proxy(fake)


def _learned(proxy, fake, **who) -> ToolLoopClient:
    client = ToolLoopClient(proxy, fake, _dropped_reasoning, **who)
    assert [client.turn() for _ in range(3)] == [(200, 1), (200, 2), (200, 1)]
    return client


def test_a_lesson_refused_in_turn_is_forgotten_and_learned_again(make_fake, make_proxy) -> None:
    fake, proxy = _deepseek(make_fake, make_proxy)
    client = _learned(proxy, fake)
    # An error no retry fixes, on the request sent with the lesson: relayed, lesson forgotten.
    assert client.turn(Reply.error(400, rejections.openai("Invalid value.").body)) == (400, 1)
    assert client.turn() == (200, 2), "without the lesson the thread pays its retry again"
    assert client.turn() == (200, 1)
    lines = proxy.requests()
    assert [line.get("retry_lesson") is not None for line in lines] == \
        [False, False, True, True, False, True]
    assert [line.get("retry_lesson_refused", False) for line in lines] == \
        [False, False, False, True, False, False]


def test_a_lesson_refused_for_its_own_kind_is_not_retried_with_the_same_fix(
        make_fake, make_proxy) -> None:
    fake, proxy = _deepseek(make_fake, make_proxy)
    client = _learned(proxy, fake)
    refused = rejections.deepseek(MUST_PASS_BACK)
    # The retry would send the very request just refused: the refusal is relayed at once.
    assert client.turn(Reply.error(refused.status, refused.body)) == (400, 1)
    assert client.turn() == (200, 2)


def test_a_server_error_keeps_the_lesson(make_fake, make_proxy) -> None:
    fake, proxy = _deepseek(make_fake, make_proxy)
    client = _learned(proxy, fake)
    assert client.turn(Reply.error(500, {"error": {"message": "boom", "type": "server_error"}}))[0] == 500
    assert client.turn() == (200, 1)


def test_another_thread_tenant_or_model_does_not_inherit_a_lesson(make_fake, make_proxy) -> None:
    fake, proxy = _deepseek(make_fake, make_proxy)
    _learned(proxy, fake)
    _learned(proxy, fake, thread="other")
    _learned(proxy, fake, key="sk-another-tenant")
    _learned(proxy, fake, model="m-2")


def test_the_store_keeps_one_lesson_per_thread_and_model_up_to_its_bound() -> None:
    lessons = RetryLessons(max_threads=2)
    a, b, c = (ThreadKey("tenant", name) for name in "abc")
    assert not lessons.some and lessons.lesson(a, "m") is None
    lessons.learn(None, "m", PLACEHOLDERS)
    assert not lessons.some, "a request without a thread teaches nothing"
    lessons.learn(a, "m", PLACEHOLDERS)
    assert lessons.some and lessons.lesson(a, "m") == PLACEHOLDERS
    assert lessons.lesson(None, "m") is None
    lessons.learn(b, "m", PLACEHOLDERS)
    lessons.learn(c, "m", PLACEHOLDERS)
    assert lessons.lesson(a, "m") is None, "the oldest thread is dropped"
    lessons.forget(c, "m")
    lessons.forget(c, "m")  # forgetting twice is harmless
    assert lessons.lesson(c, "m") is None and lessons.lesson(b, "m") == PLACEHOLDERS


names = st.text(min_size=1, max_size=12)


@given(model=names, other=names, tenant=names, thread=names,
       action=st.sampled_from(list(RetryAction)))
def test_a_lesson_never_applies_to_a_different_model(
        model: str, other: str, tenant: str, thread: str, action: RetryAction) -> None:
    lessons = RetryLessons()
    key = ThreadKey(tenant, thread)
    lessons.learn(key, model, Retry(action, "refused"))
    assert lessons.lesson(key, model) == Retry(action, "refused")
    if other != model:
        assert lessons.lesson(key, other) is None
    assert lessons.lesson(ThreadKey(tenant + "x", thread), model) is None
    assert lessons.lesson(ThreadKey(tenant, thread + "x"), model) is None


def test_an_overflow_retry_keeps_the_lesson_its_first_attempt_had(make_fake, make_proxy) -> None:
    # A model without a profile learns its window from the upstream's overflow error; the
    # compacted retry still needs the thread's fix, or DeepSeek refuses it as the first did.
    fake = make_fake(dialect="deepseek-thinking", limits={"unprofiled-*": 12_000})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake)
    client = ToolLoopClient(proxy, fake, _dropped_reasoning, model="unprofiled-deep",
                            result="def handler(request): return respond(request)\n" * 150)
    outcomes = [client.turn() for _ in range(12)]
    assert outcomes[:3] == [(200, 1), (200, 2), (200, 1)]
    overflowed = [line for line in proxy.requests() if line.get("retried") == "context_overflow"]
    assert overflowed, "the session must outgrow the window"
    assert all(line["status"] == 200 and line["retry_lesson"] for line in overflowed)
    assert {status for status, _ in outcomes} == {200}


def test_a_strip_serves_a_bounded_number_of_requests_and_other_fixes_stay() -> None:
    lessons = RetryLessons(uses=2)
    key = ThreadKey("tenant-a", "t")
    strip = Retry(RetryAction.STRIP_BLOBS, "encrypted reasoning rejected")
    lessons.learn(key, "m", strip)
    lessons.learn(key, "other", PLACEHOLDERS)
    assert [lessons.lesson(key, "m") for _ in range(3)] == [strip, strip, None]
    assert [lessons.lesson(key, "other") for _ in range(5)] == [PLACEHOLDERS] * 5
