"""The one place a thread id (or tenant) becomes storable text.

Thread ids come from clients: headers decoded with surrogateescape, JSON strings with lone
surrogates, NUL bytes, 10 KB blobs, `../`. Stores and the history files only ever see the
output of `thread_key_text`, which is clean printable text of at most 256 characters.
"""

from __future__ import annotations

import hashlib
import re

from proxy.lru import Memo
from proxy.records import ThreadKey

MAX_KEPT_CHARS = 256
DIGEST_PREFIX = "~"
_DIGEST_FORM = re.compile(r"~[0-9a-f]{64}")


def thread_key_text(raw: str) -> str:
    """Keep clean printable text as is; anything else becomes `~` + sha256 of its bytes.

    Idempotent: a result fed back in comes out unchanged, so callers may normalize twice
    (the server does, and the store does again as a safety net).
    """
    return _KEY_TEXTS[raw]


def kept_name(name: str) -> str:
    """A client-chosen name (a model's) as caches and stored records keep it: itself up to
    `MAX_KEPT_CHARS` characters, else `thread_key_text`'s digest form, so that what the proxy
    keeps per name does not grow with the name (a client can send a megabyte of one)."""
    return name if len(name) <= MAX_KEPT_CHARS else thread_key_text(name)


def storable_key(key: ThreadKey) -> ThreadKey:
    """The key as the stores persist it: both parts normalized."""
    return _STORABLE_KEYS[key]


def text_digest(text: str) -> str:
    """The hex sha256 of any text, lone surrogates included."""
    return hashlib.sha256(_bytes_of(text)).hexdigest()


def _key_text(raw: str) -> str:
    if _DIGEST_FORM.fullmatch(raw) or _is_clean(raw):
        return raw
    return DIGEST_PREFIX + text_digest(raw)


def _storable_key(key: ThreadKey) -> ThreadKey:
    return ThreadKey(thread_key_text(key.tenant), thread_key_text(key.thread))


# A request normalizes its key several times (cache lookups, store writes).
_MEMO_SIZE = 8192
_KEY_TEXTS: Memo[str, str] = Memo(_key_text, max_entries=_MEMO_SIZE, max_chars=MAX_KEPT_CHARS)
_STORABLE_KEYS: Memo[ThreadKey, ThreadKey] = Memo(
    _storable_key, max_entries=_MEMO_SIZE, max_chars=MAX_KEPT_CHARS,
    chars=lambda key: max(map(len, key)))


def _is_clean(raw: str) -> bool:
    # A leading "~" is reserved for digests, so a kept id never looks like one (no collision).
    return 0 < len(raw) <= MAX_KEPT_CHARS and raw.isprintable() and not raw.startswith("~")


def _bytes_of(raw: str) -> bytes:
    # surrogatepass, not surrogateescape: it encodes every lone surrogate (a JSON "\ud800"
    # too, which surrogateescape rejects) and stays injective over all of str.
    return raw.encode("utf-8", "surrogatepass")
