"""The fake upstream's provider-private blobs: issued with a key, verified by recomputation.

Real providers hand out opaque state that only they can read and that breaks when a client (or a
proxy) changes it or replays it elsewhere (PROTOCOL.md §4). The fake imitates each kind with a
keyed digest, so the rules can tell "issued by us, unchanged" from anything else:
- Gemini `thought_signature`: self-verifying token (nonce + MAC).
- OpenRouter `reasoning_details`: each detail carries a MAC over the rest of the detail.
- Responses item ids: `fc_`/`msg_` ids issued next to a reasoning item encode which `rs_` id they
  need, so the "provided without its required 'reasoning' item" rule works from the ids alone.
- Responses `encrypted_content`: a MAC over a canonical form of the non-reasoning items that
  preceded the reasoning item when it was issued; valid only in that same history.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from proxy import jsonio

DEFAULT_KEY = b"compaction-proxy fake upstream signing key v1"
# Gemini's documented stand-ins for calls that have no real signature (PROTOCOL.md §4.6).
GEMINI_BYPASS = frozenset({"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"})
ENCRYPTED_PREFIX = "gAAAAAB"

_NONCE_HEX = 24
_ITEM_ID = re.compile(r"^([a-z]+)_([0-9a-f]{24})([0-9a-f]{4})([0-9a-f]{8})$")


class Signer:
    def __init__(self, key: bytes = DEFAULT_KEY) -> None:
        self._key = key

    def _mac(self, *parts: str | bytes, size: int = 16) -> bytes:
        h = hashlib.blake2b(key=self._key[:64], digest_size=size)
        for part in parts:
            data = part.encode() if isinstance(part, str) else part
            h.update(len(data).to_bytes(4, "big") + data)
        return h.digest()

    # ------------------------------------------------------------ Gemini thought signatures

    def thought_signature(self, nonce: bytes) -> str:
        return base64.b64encode(b"\n$" + nonce + self._mac(b"gemini", nonce)).decode()

    def thought_signature_valid(self, signature: str) -> bool:
        raw = _b64decode(signature, urlsafe=False)
        if raw is None or len(raw) < 18 or not raw.startswith(b"\n$"):
            return False
        nonce, mac = raw[2:-16], raw[-16:]
        return hmac.compare_digest(mac, self._mac(b"gemini", nonce))

    # ------------------------------------------------------------ OpenRouter reasoning_details

    def sign_detail(self, detail: Mapping[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in detail.items() if k != "signature"}
        return {**body, "signature": base64.b64encode(self._mac(b"detail", _canonical(body))).decode()}

    def detail_valid(self, detail: Any) -> bool:
        if not isinstance(detail, Mapping) or not isinstance(detail.get("signature"), str):
            return False
        return hmac.compare_digest(self.sign_detail(detail)["signature"], detail["signature"])

    # ------------------------------------------------------------ Responses item ids

    def reasoning_id(self, nonce: str) -> str:
        return f"rs_{nonce}{self._mac('rs', nonce, size=6).hex()}"

    def item_id(self, prefix: str, nonce: str, index: int, *, reasoned: bool) -> str:
        """An output item id; `reasoned` marks it as produced together with `reasoning_id(nonce)`."""
        tag = self._mac(prefix, nonce, str(index), "r" if reasoned else "p", size=4).hex()
        return f"{prefix}_{nonce}{index:04x}{tag}"

    def required_reasoning(self, item_id: Any) -> str | None:
        """The `rs_` id an item id was issued with, when the fake issued it next to reasoning."""
        match = _ITEM_ID.match(item_id) if isinstance(item_id, str) else None
        if match is None:
            return None
        prefix, nonce, index, tag = match.groups()
        expected = self._mac(prefix, nonce, str(int(index, 16)), "r", size=4).hex()
        return self.reasoning_id(nonce) if hmac.compare_digest(tag, expected) else None

    # ------------------------------------------------------------ Responses encrypted_content

    def encrypted_content(self, history: Iterable[Mapping[str, Any]], nonce: bytes) -> str:
        mac = self._mac(b"encrypted", nonce, self.history_digest(history), size=32)
        return ENCRYPTED_PREFIX + base64.urlsafe_b64encode(nonce + mac).decode()

    def encrypted_valid(self, item: Mapping[str, Any], preceding: Sequence[Any]) -> bool:
        blob = item.get("encrypted_content")
        if not isinstance(blob, str) or not blob.startswith(ENCRYPTED_PREFIX):
            return False
        raw = _b64decode(blob[len(ENCRYPTED_PREFIX):], urlsafe=True)
        if raw is None or len(raw) <= 32:
            return False
        nonce, mac = raw[:-32], raw[-32:]
        expected = self._mac(b"encrypted", nonce, self.history_digest(preceding), size=32)
        return hmac.compare_digest(mac, expected)

    def history_digest(self, items: Iterable[Any]) -> bytes:
        forms = [history_form(i) for i in items
                 if isinstance(i, Mapping) and i.get("type") != "reasoning"]
        return self._mac(b"history", _canonical(forms), size=32)


DEFAULT_SIGNER = Signer()


def history_form(item: Mapping[str, Any]) -> dict[str, Any]:
    """What of an input item the encrypted reasoning is bound to (not ids, status or formatting)."""
    out: dict[str, Any] = {"type": item.get("type") or "message"}
    for key in ("role", "call_id", "name", "arguments"):
        if isinstance(item.get(key), str):
            out[key] = item[key]
    if isinstance(item.get("input"), str):
        out["arguments"] = item["input"]
    for key in ("content", "output"):
        text = _text_of(item.get(key))
        if text is not None:
            out[key] = text
    return out


def _text_of(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return None
    texts = [p["text"] for p in value if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return "".join(texts)


def _canonical(value: Any) -> bytes:
    return jsonio.dumps(value, sort_keys=True)


def _b64decode(text: str, *, urlsafe: bool) -> bytes | None:
    try:
        return base64.b64decode(text.encode(), altchars=b"-_" if urlsafe else None, validate=True)
    except (binascii.Error, ValueError):
        return None
