"""A chat request the proxy has nothing to do for, told from its parsed messages alone.

Every stage of the cascade works on tool calls, tool results or reasoning (SPEC §4), and the
sanitizer only on a projection something else changed (§7.3), so a list of plain messages
(roles and text, nothing else) comes out of them as it went in. The LLM compaction needs an
estimate above the trigger (§5): a JSON body holds at least as many bytes as any byte-level
tokenizer makes tokens of the text inside it (each token is at least one byte of it), and the
JSON around each message outweighs the few tokens a provider adds per message. A body of at
most half the trigger in bytes is therefore below it whoever counts; the other half is room
for a provider that counts what it adds its own way. Media (images, audio, files) are counted
by other rules than their bytes, so a request with any goes the whole way. Tool definitions and
response schemas are not bounded by their bytes either (an enum item costs a few tokens
however short): `proxy/server/untouched.py` counts them as the whole way does.

The thread's state decides too (a checkpoint, a microcompaction mark or an anchor can apply to
a list however short): that is the server's part (`proxy/server/untouched.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})
# Anything else on a message is tool traffic, reasoning, audio, or a field the proxy has not
# seen: the whole way, where each of those is looked at.
_PLAIN_KEYS = frozenset({"role", "content", "name"})


def needs_nothing(messages: Iterable[dict[str, Any]], body_bytes: int, trigger: int,
                  command: str | None) -> bool:
    """Whether a chat request with these `messages` (a body of `body_bytes`) comes out of the
    cascade as it went in and stays under `trigger` whoever counts it.

    `command`: the manual compaction command while compaction is on; a user message that
    contains it at all goes the whole way, where `manual.detect` decides what it is."""
    if body_bytes * 2 > trigger:
        return False
    for message in messages:
        role = message.get("role")
        if (type(role) is not str or role not in _PLAIN_ROLES
                or not _PLAIN_KEYS.issuperset(message)):
            return False
        name = message.get("name")
        if name is not None and type(name) is not str:
            return False  # counted as its Python text, which may be longer than its JSON
        content = message.get("content")
        said = command if role == "user" else None
        if type(content) is str:
            if said is not None and said in content:
                return False
        elif content is not None and not _plain_parts(content, said):
            return False
    return True


def _plain_parts(content: Any, command: str | None) -> bool:
    """A content list of text parts only (no part naming the command)."""
    if type(content) is not list:
        return False
    for part in content:
        if type(part) is not dict or part.get("type") != "text":
            return False
        text = part.get("text")
        if type(text) is not str or (command is not None and command in text):
            return False
    return True
