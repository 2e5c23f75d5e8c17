"""The token estimate of a request: per-entry counts, cached, plus tools, instructions, margin.

A steady agent thread resends the same messages on every turn; each count is cached under the
digest of the client's bytes (`Entry.key`) in a bounded LRU, so a request costs tokenizer work
only for entries not seen before. Entries without client bytes (made or changed by a stage)
are counted directly. Tool definitions, instructions and the rarer legacy `functions` and
response schemas, resent whole on every request, are cached by the digest of their text. An
estimator counts images (and PDF pages) by one model family's rule (`images.py`): the server
keeps one per encoding and rule. The conservative total adds the reply priming and the
configured safety margin, so it stays at or above what upstream counts. The server has a
request's many new entries counted in a worker thread (`measure_apart`, filed by `adopt`).

One estimator serves every tenant (SPEC §2), so every count it caches is a function of the
bytes counted alone, never of what some request counted first. Long texts are counted exactly
and cached by their text. A restored file's message (restore.py) is counted, by whoever counts
it, as its header plus its tool result's text (a few tokens over the exact count at most): a
compaction's post-check then finds the file's text counted with its tool result already.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple


from proxy import jsonio

from proxy.compaction.restore import HEADER as RESTORED
from proxy.conversation import Api, Entry
from proxy.lru import LRU, WeightedLRU
from proxy.settings import TokenSettings
from proxy.tokens import rules
from proxy.tokens.encoding import Tokenizer
from proxy.tokens.images import DEFAULT_RULE, ImageRule

Tools = bytes | str | Sequence[Any] | None

_BLOB_CACHE = 1024
_TEXT_CACHE_MIN = 2048  # characters: shorter texts cost less to count than to look up
_TEXT_CACHE_CHARS = 4 * 1024 * 1024
# The tag keeps a chat message and a Responses item with the same bytes apart.
_TAG = {Api.CHAT: b"c", Api.RESPONSES: b"r"}
# A restored file's message: this header line, a blank line, then its tool result's text.
_RESTORED_FILE = f"{RESTORED}: the latest content of the file "
_BLANK_LINE_TOKENS = 2  # the parts' sum bounds the whole: no token spans a blank line


class TokenEstimator:
    def __init__(self, tokenizer: Tokenizer, settings: TokenSettings | None = None,
                 images: ImageRule = DEFAULT_RULE) -> None:
        settings = settings or TokenSettings()
        self.tokenizer = tokenizer
        self.images = images
        # Logged with every request: worked out once.
        self.described = tokenizer.describe()
        self.margin = settings.safety_margin
        self._entries: LRU[bytes, int] = LRU(settings.cache_entries)
        # The counts are margin-free (`with_margin` adds it to the total): an estimator with
        # another margin shares them, memos and caches alike (`margined`).
        self._memo_key = ("tokens", tokenizer.name, images.name)
        self._blobs: LRU[bytes, int] = LRU(_BLOB_CACHE)
        # (characters, tokens) per long text: weighed by its length, which it keeps alive.
        self._texts: WeightedLRU[str, tuple[int, int]] = WeightedLRU(_TEXT_CACHE_CHARS, _chars)

    def margined(self, margin: float) -> TokenEstimator:
        """This estimator with another safety margin, sharing its caches (a reload's new
        `tokens.safety_margin`: the counts made so far still hold)."""
        again = copy.copy(self)
        again.margin = margin
        return again

    def text_tokens(self, text: str) -> int:
        """Tokens of a text, in an entry or built by the proxy (a restored file, a summary). A
        long one is cached: a summary is counted when built and again, whole, when the
        projection it went into is measured; a tool result's text again in its restored file."""
        if len(text) < _TEXT_CACHE_MIN:
            return self.tokenizer.count(text)
        found = self._texts.get(text)
        if found is None:
            found = (len(text), self._long_text_tokens(text, self.text_tokens,
                                                       self.tokenizer.count))
            self._texts.put(text, found)
        return found[1]

    @staticmethod
    def _long_text_tokens(text: str, text_tokens: rules.Count, count: rules.Count) -> int:
        """`text_tokens` of a long text: `count` (the tokenizer's) of it, or of a restored
        file's header and then `text_tokens` of its body."""
        if not text.startswith(_RESTORED_FILE):
            return count(text)
        # At or a few tokens above the exact count, the same whoever counts it first.
        head, _, body = text.partition("\n\n")
        return count(head) + text_tokens(body) + _BLANK_LINE_TOKENS

    def entry_tokens(self, entry: Entry) -> int:
        found = entry.memo.get(self._memo_key)
        if found is not None:
            return found
        if entry.key is None:
            found = self._measure(entry)
        else:
            key = _TAG[entry.api] + entry.key
            found = self._entries.get(key)
            if found is None:
                found = self._measure(entry)
                self._entries.put(key, found)
        entry.memo[self._memo_key] = found
        return found

    def _measure(self, entry: Entry, text_tokens: rules.Count | None = None) -> int:
        text_tokens = text_tokens or self.text_tokens
        if entry.api is Api.CHAT:
            return rules.chat_message_tokens(entry.raw, text_tokens, self.images)
        return rules.responses_item_tokens(entry.raw, text_tokens, self.images)

    def unmeasured(self, entries: Sequence[Entry]) -> list[Entry]:
        """The entries `sizes` would have to count: neither memoized nor cached. Reads only:
        no cache entry is made newer."""
        memos = list(map(dict.get, map(_MEMO, entries), repeat(self._memo_key)))
        if None not in memos:  # a steady request: found in C
            return []
        cached = self._entries
        return [entry for entry, memo in zip(entries, memos) if memo is None
                and (entry.key is None or _TAG[entry.api] + entry.key not in cached)]

    def measure_apart(self, entries: Sequence[Entry]) -> Measured:
        """What `sizes` would count for `entries`, worked out without reading or writing this
        estimator's caches or the entries' memos: safe in a worker thread while the event loop
        goes on using the estimator. `adopt` files the result, on the loop.

        The texts are gathered first and counted together (`Tokenizer.counts`): tiktoken lets
        go of the GIL once a batch, not once a text."""
        entries = tuple(entries)
        wanted: dict[str, None] = {}  # every text the tokenizer is asked for, once

        def gather(text: str) -> int:
            if len(text) >= _TEXT_CACHE_MIN and text.startswith(_RESTORED_FILE):
                return self._long_text_tokens(text, gather, gathered)
            return gathered(text)

        def gathered(text: str) -> int:
            wanted[text] = None
            return 0

        for entry in entries:
            self._measure(entry, gather)
        tokens_of = dict(zip(wanted, self.tokenizer.counts(list(wanted))))
        texts: dict[str, int] = {}

        def text_tokens(text: str) -> int:  # as `text_tokens`, with the counts made above
            if len(text) < _TEXT_CACHE_MIN:
                return tokens_of[text]
            found = texts.get(text)
            if found is None:
                found = texts[text] = self._long_text_tokens(text, text_tokens,
                                                             tokens_of.__getitem__)
            return found

        return Measured(entries, tuple(self._measure(entry, text_tokens) for entry in entries),
                        texts)

    def adopt(self, measured: Measured) -> None:
        """File counts made by `measure_apart` as `sizes` would have filed them."""
        for entry, found in zip(measured.entries, measured.tokens):
            if entry.key is not None:
                self._entries.put(_TAG[entry.api] + entry.key, found)
            entry.memo[self._memo_key] = found
        for text, found in measured.texts.items():
            self._texts.put(text, (len(text), found))

    def sizes(self, entries: Iterable[Entry]) -> list[int]:
        # A steady request's entries were all counted before: a dict read each, no calls.
        entries = entries if isinstance(entries, (list, tuple)) else list(entries)
        # Read with `map`: no Python step per entry, and a projection has hundreds.
        out = list(map(dict.get, map(_MEMO, entries), repeat(self._memo_key)))
        if None in out:
            # Only the new entries are visited: found in C, a few among hundreds.
            for i in list(compress(count(), map(is_, out, repeat(None)))):
                out[i] = self.entry_tokens(entries[i])
        return out  # type: ignore[return-value]

    def tools_tokens(self, tools: Tools) -> int:
        """Tool definitions, given as the request's JSON bytes or already parsed."""
        if tools is None or tools == b"" or tools == "":
            return 0
        blob = tools.encode() if isinstance(tools, str) else tools
        data = blob if isinstance(blob, bytes) else jsonio.dumps(blob)
        return self._cached(b"t" + _digest(data),
                            lambda: rules.tools_tokens(_parsed(blob), self.text_tokens))

    def instructions_tokens(self, instructions: Any) -> int:
        if instructions is None or instructions == "":
            return 0
        data = (instructions.encode("utf-8", "surrogatepass") if isinstance(instructions, str)
                else jsonio.dumps(instructions))
        return self._cached(b"i" + _digest(data),
                            lambda: rules.instructions_tokens(instructions, self.text_tokens,
                                                              self.images))

    def definitions_tokens(self, definitions: Any) -> int:
        """`rules.request_definitions` of a request: None (nothing to count) on most."""
        if definitions is None:
            return 0
        return self._cached(b"d" + _digest(jsonio.dumps(definitions)),
                            lambda: rules.definitions_tokens(definitions, self.text_tokens))

    def _cached(self, key: bytes, compute: Callable[[], int]) -> int:
        found = self._blobs.get(key)
        if found is None:
            found = compute()
            self._blobs.put(key, found)
        return found

    def with_margin(self, tokens: int) -> int:
        return math.ceil(tokens * (1.0 + self.margin))

    def conservative_total(self, entries: Iterable[Entry], tools: Tools = None,
                           instructions: Any = None, sizes: Sequence[int] | None = None,
                           definitions: Any = None) -> int:
        """The whole request, margin included: never below what upstream counts."""
        body = sum(sizes) if sizes is not None else sum(self.sizes(entries))
        fixed = rules.REPLY_PRIMING
        # Most requests have neither (or one): no call for what counts nothing.
        if tools is not None:
            fixed += self.tools_tokens(tools)
        if instructions is not None:
            fixed += self.instructions_tokens(instructions)
        if definitions is not None:
            fixed += self.definitions_tokens(definitions)
        return self.with_margin(body + fixed)


class Measured(NamedTuple):
    """Token counts of entries, worked out apart from the estimator (`measure_apart`)."""

    entries: tuple[Entry, ...]
    tokens: tuple[int, ...]
    texts: dict[str, int]  # the long texts counted on the way, as `text_tokens` caches them


_MEMO = attrgetter("memo")


def _chars(found: tuple[int, int]) -> int:
    return found[0]


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _parsed(tools: bytes | Sequence[Any]) -> Any:
    if not isinstance(tools, bytes):
        return tools
    try:
        return jsonio.loads(tools)
    except ValueError:
        return None
