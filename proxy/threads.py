"""Which thread and which tenant a request belongs to (SPEC §2).

The thread id is the first found of the configured sources, in order: request headers, then
body fields (dotted paths such as `metadata.thread_id`). Without one, `fallback: fingerprint`
derives it from the leading system text and the first user message; `none` leaves the request
stateless. The tenant is a digest of the credential the client presented, never the credential.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from proxy.lru import Memo
from proxy.redaction import CREDENTIAL_HEADERS
from proxy.settings import ThreadSettings
from proxy.store.keys import MAX_KEPT_CHARS, thread_key_text

ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class ThreadIdentity:
    thread: str | None  # None: stateless request
    source: str  # where it came from: "header:x-thread-id", "body:prompt_cache_key", "fingerprint", "none"
    tenant: str


def tenant_digest(headers: Mapping[str, str],
                  names: Sequence[str] = CREDENTIAL_HEADERS) -> str:
    """A digest of the presented credential, found under the first of `names` (lower case,
    `threads.credential_headers`) the request has: equal keys share state, nothing else does."""
    for name in names:
        value = headers.get(name)
        if value:
            return _CREDENTIAL_DIGESTS[name, value]
    return ANONYMOUS


def _credential_digest(header: tuple[str, str]) -> str:
    name, value = header
    token = value.strip()
    if name == "authorization" and token[:7].lower() == "bearer ":
        token = token[7:].strip()
    data = ("compaction-proxy/tenant\0" + token).encode("utf-8", "surrogateescape")
    return hashlib.sha256(data).hexdigest()[:32]


def header_thread(headers: Mapping[str, str], settings: ThreadSettings,
                  tenant: str) -> ThreadIdentity | None:
    """The thread named by a configured header: known before the body is parsed."""
    for name in settings.headers:
        value = headers.get(name)
        if value:
            return _HEADER_IDENTITIES[value, name, tenant]
    return None


def _header_identity(named: tuple[str, str, str]) -> ThreadIdentity:
    thread, header, tenant = named
    return ThreadIdentity(thread, f"header:{header}", tenant)


def body_thread_hint(body: bytes, settings: ThreadSettings, tenant: str) -> ThreadIdentity | None:
    """The thread a body field probably names, read from the raw bytes before any parse.

    Only a guess, for finding the thread's previous request (`proxy.reparse` trusts bytes, not
    this): the key may sit inside some other string. The thread itself is resolved from the
    parsed body as always. Values with escapes are not guessed at.
    """
    for path, needle, pattern in _hint_patterns(settings.body_fields):
        at = _find_key(body, needle)
        found = pattern.match(body, at) if at >= 0 else None
        if found is not None and found.group(1):
            try:
                value = found.group(1).decode("utf-8")
            except UnicodeDecodeError:
                continue
            return ThreadIdentity(value, f"body:{path}", tenant)
    return None


def _find_key(body: bytes, needle: bytes) -> int:
    """Where `needle` sits near either end of the body, or -1. Top-level fields come before
    or after the long message list; searching only there keeps a long body cheap."""
    window = 8192
    at = body.rfind(needle, max(0, len(body) - window))
    return at if at >= 0 else body.find(needle, 0, window)


@lru_cache(maxsize=16)
def _hint_patterns(paths: tuple[str, ...]) -> tuple[tuple[str, bytes, re.Pattern[bytes]], ...]:
    out = []
    for path in paths:
        needle = b'"' + path.rsplit(".", 1)[-1].encode() + b'"'
        out.append((path, needle, re.compile(re.escape(needle) + rb'\s*:\s*"([^"\\]*)"')))
    return tuple(out)


def resolve_thread(headers: Mapping[str, str], body: Mapping[str, Any] | None,
                   settings: ThreadSettings,
                   leading: Sequence[Any] | Callable[[], Sequence[Any]] = (),
                   tenant: str | None = None) -> ThreadIdentity:
    """`leading` may be a callable: the fingerprint material is built only when needed.
    `tenant` is the caller's `tenant_digest(headers)`, when it has it already."""
    if tenant is None:
        tenant = tenant_digest(headers, settings.credential_headers)
    found = header_thread(headers, settings, tenant)
    if found is not None:
        return found
    if body is not None:
        for path in settings.body_fields:
            value = _dotted(body, path)
            if isinstance(value, str) and value:
                return ThreadIdentity(value, f"body:{path}", tenant)
    material = leading() if callable(leading) else leading
    if settings.fallback == "fingerprint" and material:
        return ThreadIdentity(fingerprint(material), "fingerprint", tenant)
    return ThreadIdentity(None, "none", tenant)


def fingerprint(leading: Sequence[Any]) -> str:
    """`fp:` + a digest of the leading system text and the first user message."""
    digest = hashlib.blake2b(digest_size=12)
    for part in leading:
        digest.update(part if isinstance(part, bytes) else str(part).encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
    return "fp:" + digest.hexdigest()


def _dotted(body: Mapping[str, Any], path: str) -> Any:
    value: Any = body
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def loggable(thread: str | None) -> str | None:
    """A thread id as the state keeps it, the form `threads` lists and `inspect` accepts: the
    client's own id when it is printable text of up to 256 characters, else `~` and a digest
    (thread ids are client data: a log line never carries control characters or a huge id)."""
    return None if thread is None else thread_key_text(thread)


# A client sends the same credential header, and names its thread the same way, on every
# request: one lookup instead of a parse and a hash, and one (frozen) identity for them all.
_CREDENTIAL_DIGESTS: Memo[tuple[str, str], str] = Memo(
    _credential_digest, max_entries=1024, max_chars=4096, chars=lambda header: len(header[1]))
_HEADER_IDENTITIES: Memo[tuple[str, str, str], ThreadIdentity] = Memo(
    _header_identity, max_entries=1024, max_chars=MAX_KEPT_CHARS,
    chars=lambda named: len(named[0]))
