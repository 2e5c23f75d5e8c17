"""Repair and an `item_reference` between a dropped reasoning item and an answered call.

A store-on client echoes a step's reasoning by reference: the call after the reference is that
reasoning's, not the dangling reasoning item's before it. Dropping the dangling item must keep
the call and its screenshot (SPEC §5: every real answer is kept). Found by
`test_properties_repair` (seed 8, twenty times the examples), shrunk.
"""

from __future__ import annotations

from proxy.core.repair import repair
from tests.factories import entries_of, wire

_SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def test_a_call_after_a_reference_is_kept_when_the_reasoning_before_goes() -> None:
    elements = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "id": "rs_dangling", "summary": [], "encrypted_content": "gAAAAABx"},
        {"type": "item_reference", "id": "rs_cu0"},
        {"type": "computer_call", "id": "cu_0", "call_id": "call_computer0", "action": {"type": "screenshot"},
         "pending_safety_checks": [], "status": "completed"},
        {"type": "computer_call_output", "call_id": "call_computer0", "output": _SCREENSHOT},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done", "annotations": []}]},
    ]
    out = repair(entries_of("responses", elements))
    assert wire(out.entries) == [elements[0], *elements[2:]]
    assert out.origins == (0, 2, 3, 4, 5) and out.dropped_reasoning == 1
