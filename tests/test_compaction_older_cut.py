"""A checkpoint whose cut an older version chose where the summary cut may no longer fall
(`boundary.summary_cuts`): between two items of one Responses step with an output between them.
The summary took the step's reasoning item and the tail kept a later item whose id names it,
so the next turn was refused upstream. Such a checkpoint is not used any more: the thread goes
on from the client's list (summarized again once it passes its trigger), and the upstream
accepts the turn. (Were it used, the refusal would now buy a retry that passes.)"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from proxy.compaction import apply, cutoff
from proxy.compaction.apply import SUMMARY_HEADER
from proxy.conversation import Kind
from proxy.core.boundary import is_safe_cut, is_summary_cut, safe_cuts
from proxy.testing.rules import check_responses
from proxy.testing.summarizer import is_summarizer_request
from tests.factories import entries_of
from tests import test_properties_manual_compact as turns
from tests.test_properties_manual_compact import Client, compact_turn, normal_turn, rig

__all__ = ["rig"]  # the module's fixture: one proxy and fake upstream for these tests

CASE = Path(__file__).parent / "data/compact_call_astray.json"


@pytest.mark.parametrize("fixed", [True, False], ids=["this version", "the older rebuild"])
def test_a_checkpoint_cut_between_a_steps_items_is_no_longer_used(
        rig, monkeypatch: pytest.MonkeyPatch, fixed: bool) -> None:  # type: ignore[no-untyped-def]
    # The turns record Hypothesis statistics, which raises outside a Hypothesis test.
    monkeypatch.setattr(turns, "event", lambda _: None)
    case = orjson.loads(CASE.read_bytes())
    client = Client(rig, case)
    ((k, _),) = case["commands"]
    client.add(case["elements"][:k])
    with monkeypatch.context() as older:
        older.setattr(cutoff, "summary_cuts", safe_cuts)  # the cut as the older version chose it
        compact_turn(client, None, repeated=False)
    (stored,) = client.checkpoints()
    entries = entries_of("responses", case["elements"][:k])
    cut = stored.cutoff_index
    assert is_safe_cut(entries, cut) and not is_summary_cut(entries, cut)
    assert entries[cut].kind is Kind.CALL and entries[cut - 1].kind is Kind.RESULT

    client.add(case["elements"][k:k + 1] or [client.fresh_user()])
    if fixed:
        before = len(rig.fake.requests)
        normal_turn(client)  # 200: what went upstream was accepted
        (sent,) = rig.fake.requests[before:]
        assert SUMMARY_HEADER.encode() not in sent.body, "the checkpoint was used"
        assert len(client.checkpoints()) == 1, "below its trigger: nothing summarized again"
        return
    monkeypatch.setattr(apply, "is_summary_cut", is_safe_cut)  # the older rebuild: it applies
    answer, sent = client.post(client.history)
    first, *retried = [r for r in sent if not is_summarizer_request(r.json)]
    # Refused upstream: the tail's item names the reasoning item the summary took. That refusal
    # now buys a retry without such ids, which passes (the older version answered a 400).
    refused = check_responses(first.json, signer=rig.fake.signer)
    assert refused is not None
    assert "without its required 'reasoning' item" in refused.body["error"]["message"]
    assert SUMMARY_HEADER.encode() in first.body and len(retried) == 1
    assert answer.status_code == 200, answer.text
    line = client.rig.proxy.requests()[-1]
    assert line["retried"] == "item id refers to a dropped reasoning item"
