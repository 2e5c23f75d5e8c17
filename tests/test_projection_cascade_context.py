"""What `cascade_of` tells the stages: each `CascadeContext` field from its source (built
positionally on the hot path: the order matters)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy import projection
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Api, entries_from
from proxy.core.sanitize import Policy
from proxy.identity import Identities
from proxy.projection import Situation, cascade_of
from proxy.records import MicrocompactMark
from proxy.settings import parse_settings
from proxy.tokens.encoding import tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.images import image_rule


def test_each_field_comes_from_the_situation(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = parse_settings({"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}}}, {})
    estimator = TokenEstimator(tokenizer_for("gpt-4o", None), settings.tokens,
                               image_rule("gpt-4o", None))
    identities = Identities(64)
    th = Thresholds(trigger=700, limit=1000, keep_tokens=300, keep_messages=None, profiled=True)
    mark = MicrocompactMark("m1", 1, 5.0)
    situation = Situation(settings.compaction, estimator, identities, th, 1234.5, 1200.0, mark,
                          (), Policy.PRIVATE_FREE, True)
    entries = entries_from(Api.CHAT, [{"role": "user", "content": "a"},
                                      {"role": "assistant", "content": "b"}])
    seen: list[Any] = []
    monkeypatch.setattr(projection, "run_cascade", lambda e, context: seen.append(context))

    cascade_of(entries, situation, compacted=True, sizes=[3, 4])

    context = seen[0]
    assert context.settings is settings.compaction
    assert context.measure == estimator.entry_tokens and list(context.sizes) == [3, 4]
    assert (context.keep_tokens, context.keep_messages) == (300, None)
    assert context.window_step == (int(1000 * settings.compaction.window_step_ratio) or None)
    assert list(context.message_ids) == identities.ids(entries)
    assert (context.now, context.last_activity, context.mark) == (1234.5, 1200.0, mark)
    assert (context.compacted, context.keep_loop, context.policy) == (
        True, True, Policy.PRIVATE_FREE)
