"""The retry after OpenAI refuses an id that names a missing reasoning item
(`proxy.core.unreasoned`), as a property.

A client keeps a response's items but drops some of its reasoning items (or all), on valid
Responses conversations whose ids and blobs the fake signed (`tests.strategies`): web searches
and code runs among them. The cascade's repair and the strip's sanitizer policy run first, as in
the retry, then the fix. What the fake's rules say of the result decides: it passes them, every
message's text and every call and output of a kept call is the client's, only ids and
provider-private (reasoning, compaction) or server items went, and the fix finds nothing more
to do in what it made.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from proxy.compaction.overflow import Retry, RetryAction, private_state_rejection
from proxy.conversation import Kind
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.core.sanitize import Policy, sanitize
from proxy.core.unreasoned import without_unreasoned_items
from proxy.server.prepared import Attempt
from proxy.server.retry_attempts import after_rejection, fixed, further_fix
from proxy.testing.rules import check_responses
from proxy.testing.signing import DEFAULT_SIGNER
from tests.factories import responses, wire
from tests.strategies import conversations, is_server_item


@st.composite
def reasoning_dropped(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid conversation whose client dropped some of its reasoning items, at least one
    when it has any."""
    elements = draw(conversations("responses"))
    at = [i for i, e in enumerate(elements) if e.get("type") == "reasoning"]
    gone = set(draw(st.lists(st.sampled_from(at), min_size=1, unique=True))) if at else set()
    return [e for i, e in enumerate(elements) if i not in gone]


@st.composite
def references_dropped(draw: st.DrawFn, several: bool = True) -> list[dict[str, Any]]:
    """A store-on client's conversation: each reasoning item echoed as an `item_reference`
    (which the strip's policy keeps), some of them missing (`several=False`: one)."""
    elements = [{"type": "item_reference", "id": e["id"]} if e.get("type") == "reasoning" else e
                for e in draw(conversations("responses"))]
    at = [i for i, e in enumerate(elements) if e.get("type") == "item_reference"]
    gone = set(draw(st.lists(st.sampled_from(at), min_size=1, max_size=None if several else 1,
                             unique=True))) if at else set()
    return [e for i, e in enumerate(elements) if i not in gone]


def _visible(item: dict[str, Any]) -> dict[str, Any]:
    """What an item says, without its id."""
    return {k: v for k, v in item.items() if k != "id"}


def _refusal(items: list[dict[str, Any]]) -> Any:
    return check_responses({"model": "m", "input": items}, signer=DEFAULT_SIGNER,
                           verify_encrypted=DEFAULT_SIGNER.encrypted_valid)


@given(reasoning_dropped())
def test_the_retry_without_ids_that_name_missing_reasoning_passes(elements: list) -> None:
    retried = sanitize(repair(responses(*elements)).entries, Policy.COMPACTED).entries
    out, _ = without_unreasoned_items(retried)
    sent = wire(out)
    refused = _refusal(sent)
    assert refused is None, refused.body
    # Nothing a message says, nor a call the client made, went; what went is an id, a
    # reasoning item or a server item. What is new is a cancelled output, claiming nothing.
    said = [_visible(e) for e in elements
            if e.get("type") not in ("reasoning", "compaction") and not is_server_item(e)]
    left = [_visible(i) for i in sent if not is_server_item(i)
            and not (i.get("output") == CANCELLED_TEXT)]
    assert left == said
    made = [e for e in out if e.kind is Kind.RESULT and e.raw.get("output") == CANCELLED_TEXT]
    assert all(e.answers in {c.id for x in out for c in x.calls} for e in made)
    again, changed = without_unreasoned_items(out)
    assert changed == 0 and again == out


@given(st.one_of(reasoning_dropped(), references_dropped(several=False)))
def test_the_retry_after_the_refusal_it_answers_passes(elements: list) -> None:
    """As the proxy retries: the client's list (repaired) is refused for an item whose
    reasoning item is missing, and the retry (the strip's policy, then the fix, told the item
    the refusal named) passes. A reference the client left out hides its response's items
    from the rule when another reference comes before them in their turn, and the refusal
    names the first of them only. (Two left out, a kept one between, need two refusals to be
    known: the second is relayed, and the next request passes: the property below.)"""
    first = repair(responses(*elements)).entries
    refused = _refusal(wire(first))
    retry = None if refused is None else private_state_rejection(refused.status, refused.body)
    assume(retry is not None and retry.action is RetryAction.DROP_UNREASONED)
    retried = sanitize(first, Policy.COMPACTED).entries
    out, _ = without_unreasoned_items(retried, named=retry.items)
    again = _refusal(wire(out))
    assert again is None, again.body


def _sent(first: Any, attempt: Attempt) -> list[dict[str, Any]]:
    """What an attempt sends: the client's list (repaired) as it came, or the fix's."""
    if attempt.policy is None and attempt.placeholders is None:
        return wire(first)
    entries = sanitize(first, attempt.policy).entries if attempt.policy else first
    return wire(attempt.placeholders(entries)[0] if attempt.placeholders else entries)


@given(references_dropped())
def test_a_thread_that_left_out_several_references_passes_a_request_later(elements: list) -> None:
    """The thread's requests as the pipeline makes them (a lesson at once, one retry after a
    refusal; a retry refused for another item than its fix names teaches the fix naming both):
    each request's refusals tell the fix of at least one more missing reference, so a
    request passes before the fix names every item."""
    first = repair(responses(*elements)).entries
    # Each request names at least one more item: never more requests than items with an id.
    requests = sum("id" in e for e in elements) + 1
    lesson: Retry | None = None
    for _ in range(requests):
        attempt = Attempt() if lesson is None else fixed(lesson, lesson=True)
        refused = _refusal(_sent(first, attempt))
        if refused is None:
            return
        retry, forgotten = after_rejection(attempt, refused.status, refused.body,
                                           can_compact=False, compacted=False)
        if forgotten:
            lesson = None
        if retry is None:
            continue
        again = _refusal(_sent(first, retry))
        if again is None:
            return
        rejection = private_state_rejection(again.status, again.body)
        assert retry.fix is not None and rejection is not None, again.body
        assert rejection.action is retry.fix.action, again.body
        lesson = further_fix(retry.fix, again.status, again.body) or lesson
    raise AssertionError(f"still refused after {requests} requests")
