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

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Kind
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.core.sanitize import Policy, sanitize
from proxy.core.unreasoned import without_unreasoned_items
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
