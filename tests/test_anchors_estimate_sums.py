"""An anchored estimate's sums (`anchors._anchored`): the echo found right at the anchor's
place takes two slice sums; they must equal the general per-index sums over any echo."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from proxy.anchors import _anchored
from proxy.records import Anchor


def reference(anchor: Anchor, response: list[int], sizes: list[int], margin: float) -> int:
    echo = max(anchor.output_tokens, sum(sizes[i] for i in response))
    matched = set(response)
    after = sum(sizes[i] for i in range(anchor.position, len(sizes)) if i not in matched)
    return anchor.input_tokens + echo + math.ceil(after * (1.0 + margin))


@given(st.lists(st.integers(0, 500), max_size=12), st.data(),
       st.sampled_from([0.0, 0.05, 0.3]), st.integers(0, 400))
def test_the_slice_sums_equal_the_per_index_sums(sizes: list[int], data: st.DataObject,
                                                 margin: float, output: int) -> None:
    position = data.draw(st.integers(0, len(sizes)))
    later = list(range(position, len(sizes)))
    if data.draw(st.booleans()):  # the usual echo: contiguous from the anchor's place
        response = later[:data.draw(st.integers(0, len(later)))]
    else:  # reasoning items skipped in between, or the echo further on
        response = sorted(data.draw(st.sets(st.sampled_from(later), max_size=len(later)))
                          if later else set())
    digests = tuple(f"d{i}" for i in response)
    anchor = Anchor(response_digests=digests, position=position, prefix_digest="p",
                    input_tokens=1000, output_tokens=output)
    assert _anchored(anchor, response, sizes, margin) == reference(
        anchor, response, sizes, margin)
