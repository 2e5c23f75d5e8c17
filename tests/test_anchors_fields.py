"""`anchors.anchor_for` builds its `Anchor` with positional arguments (every answer makes one,
and keywords cost a dict's packing and unpacking): each field must come from its source."""

from __future__ import annotations

from proxy.anchors import anchor_for, projection_digest
from proxy.conversation import entry_from_chat
from proxy.usage import Usage


def test_each_field_of_an_anchor_comes_from_its_source() -> None:
    projection = [entry_from_chat({"role": "user", "content": "hi"})]
    usage = Usage(input=101, output=57, cached=13, cache_write=5, reasoning=7, visible_output=50)
    anchor = anchor_for(projection, b"ctx", ("d1", "d2"), usage, "m-1", 12.5)
    assert anchor.to_data() == {
        "response_digests": ["d1", "d2"], "position": 1,
        "prefix_digest": projection_digest(projection, b"ctx"), "input_tokens": 101,
        "output_tokens": 50, "cached_tokens": 13, "reasoning_tokens": 7, "model": "m-1",
        "created_at": 12.5}
    assert anchor.echo_end == 3
