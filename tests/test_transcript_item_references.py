"""The summarizer's transcript of an `item_reference`: its content is upstream's, so the
transcript says an item was there and was not shown, never that it held nothing."""

from __future__ import annotations

from proxy.compaction.transcript import render_blocks
from proxy.conversation import Api
from tests.test_compaction_support import conv, count, measure, r_user


def test_a_referenced_item_is_named_as_not_shown() -> None:
    entries = conv(Api.RESPONSES, [r_user("Fix the lexer."),
                                   {"type": "item_reference", "id": "msg_stored1"},
                                   r_user("Go on.")])
    texts = [b.text for b in render_blocks(entries, range(3), count, measure)]
    assert len(texts) == 3
    assert "msg_stored1" in texts[1] and "not shown" in texts[1]
    assert "no text" not in texts[1]
