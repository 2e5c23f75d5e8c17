"""Usage anchors across moved prompt-cache markers (SPEC §6).

Cline and OpenHands (through LiteLLM or OpenRouter, to Claude) put Anthropic's `cache_control`
on their newest user messages and tool results and take it off the older ones every turn. A
marker counts no token, so the projection an anchor answered is still the prefix of the next
one; only the bytes moved. Without the anchor the estimate falls back to the proxy's own count,
which undercounts a model it has no tokenizer for."""

from __future__ import annotations

import json
import time

from proxy.anchors import estimate, make_anchor, projection_digest, response_entries
from proxy.conversation import Api, without_cache_markers
from proxy.identity import Identities
from proxy.usage import normalize
from tests.factories import chat

IDS = Identities()
MARK = {"type": "ephemeral"}


def _user(text: str, marked: bool) -> dict:
    part = {"type": "text", "text": text, **({"cache_control": MARK} if marked else {})}
    return {"role": "user", "content": [part]}


def test_a_marker_moved_off_an_older_message_keeps_the_anchor() -> None:
    system = {"role": "system", "content": [{"type": "text", "text": "Be brief.", "cache_control": MARK}]}
    asked = [system, _user("Read a.py.", True)]
    answer = {"role": "assistant", "content": "It prints 1."}
    usage = normalize({"prompt_tokens": 9_000, "completion_tokens": 20}, Api.CHAT)
    assert usage is not None
    anchor = make_anchor(chat(*asked), b"", response_entries(Api.CHAT, answer), usage, IDS.digest)

    moved = chat(system, _user("Read a.py.", False), answer, _user("Now b.py.", True))
    found = estimate(moved, [10] * len(moved), b"", [anchor], 50, IDS.digest)

    assert found.anchor == anchor
    assert found.tokens == 9_000 + 20 + 10


def test_other_changes_still_break_the_prefix() -> None:
    plain = chat(_user("Read a.py.", False))
    assert projection_digest(chat(_user("Read a.py.", True))) == projection_digest(plain)
    assert projection_digest(chat(_user("Read b.py.", True))) != projection_digest(plain)


def test_markers_are_cut_wherever_they_sit_and_text_that_names_them_is_not() -> None:
    spaced = json.dumps({"cache_control": MARK, "type": "text", "text": "x"}).encode()
    compact = json.dumps({"type": "text", "cache_control": None, "text": "x"},
                         separators=(",", ":")).encode()
    assert without_cache_markers(spaced) == b'{"type": "text", "text": "x"}'
    assert without_cache_markers(compact) == b'{"type":"text","text":"x"}'
    quoted = json.dumps({"text": 'set "cache_control": {"type": "ephemeral"}'}).encode()
    assert without_cache_markers(quoted) == quoted


def test_a_hostile_run_of_whitespace_is_cut_in_linear_time() -> None:
    text = b" " * 400_000
    data = b'[{"text": "' + text + b'"}, ' + text + b'"cache_control" ' + text + b': {"type": "ephemeral"}]'
    started = time.perf_counter()
    cut = without_cache_markers(data)
    assert time.perf_counter() - started < 1.0
    assert cut == b'[{"text": "' + text + b'"}]'
