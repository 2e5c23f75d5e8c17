"""Summarizer requests carry no private state (SPEC §7.1), for messy conversations of both APIs
with every reasoning kind.

Every plain reasoning value is first replaced by a marker (`tests.strategies.marked`), so that
any reasoning reaching the request shows up by substring, as the blobs and signatures do.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.cutoff import FULL, Cutoff
from proxy.compaction.summarizer import plan_summary
from proxy.conversation import Api, leading_instructions
from proxy.settings import SummarizerSettings
from tests.factories import entries_of
from tests.strategies import SECRETS, conversations, marked
from tests.test_compaction_support import count, measure


@given(st.sampled_from(("chat", "responses")).flatmap(
    lambda api: st.tuples(st.just(api), conversations(api, messy=True))))
def test_no_summarizer_request_carries_reasoning_or_blobs(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    entries = entries_of(api, [marked(e) for e in elements])
    lead = leading_instructions(entries)
    cutoff = Cutoff(index=len(entries), lead=lead, start=lead, strategy=FULL)
    plan = plan_summary(entries, cutoff, api=Api(api), model="m", now=datetime(2026, 1, 1, tzinfo=UTC),
                        settings=SummarizerSettings(max_output_tokens=500), window=3000,
                        count=count, measure=measure)
    for step in range(plan.steps):
        text = orjson.dumps(plan.request(step, "carried" if step else None)).decode()
        found = [s for s in SECRETS if s in text]
        assert not found, found
