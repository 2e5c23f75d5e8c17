"""Credentials in free text and in URLs: what `redact` removes from log messages and exception
texts, and what `redacted_url` hides of an upstream's base_url.

Structured fields are masked by name (`logs._drop_secrets`); text is different. aiohttp's parser
quotes the raw header line it refused (`b'Authorization: Bearer sk-...\\x01'`), or the first
100 bytes of a line too long to read, and any library may put a token in a message. So the text
of every record that did not come from the proxy's own events, and every exception text, goes
through here before it is written.

A URL may carry a key in three places: its userinfo (`https://user:key@host`), its query
(`?key=...`) and, at some gateways, its path (`/v1/<key>/...`, `/key/<key>/`). The password and
every query value are always masked. A path segment is masked when it looks like a credential
(`looks_like_credential`) or follows a segment that names one (`key`, `token`, ...): ordinary
path words (`v1`, `openai`, `deployments/gpt-4o-mini-2024-07-18`) stay readable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote

# A credential header's value runs to the end of its line: a real line break, or the `\r` or
# `\n` escape of a bytes repr. Quotes are part of it, so a value holding one is not cut short.
_HEADER_VALUE = re.compile(
    r"(?i)((?:proxy-)?authorization|(?:x-)?api[-_]key)(['\"]?\s*[:=]\s*)(?:[^\r\n\\]|\\[^rn])+")
_BEARER = re.compile(r"(?i)\b(bearer\s+)\S+")
_SK_KEY = re.compile(r"(?<![\w-])sk-[\w-]+")
_URL_IN_TEXT = re.compile(r"(?i)\bhttps?://[^\s'\"<>]+")
# Any scheme: check-config also shows a refused `ftp://user:password@host`. The authority runs
# to the first '/', '?' or '#'; its userinfo to the last '@' in it, as urlsplit reads it.
_URL_PARTS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?", re.S)
_QUERY_VALUE = re.compile(r"((?:^|&)[^=&]*=)[^&]*")
# Segments that say the next one is a credential (`/key/<key>/`), compared lowercased.
_KEY_LABELS = frozenset({"key", "keys", "apikey", "api-key", "api_key", "token", "tokens",
                         "access-token", "access_token", "secret", "password"})
# Prefixes providers give their keys (OpenAI/Anthropic `sk-`, Google `AIza`, Groq `gsk_`, xAI,
# Hugging Face, GitHub, NVIDIA, Perplexity, Replicate), with enough after them to be one.
_KEY_PREFIX = re.compile(r"(?:(?i:sk|pk|rk)[-_]|AIza|gsk_|xai-|hf_|gh[pousr]_|github_pat_|nvapi-"
                         r"|pplx-|r8_)[\w.~+=-]{8,}")
# A long run of letters and digits mixing both: random keys (base62, hex) have one; model and
# deployment names are short words between dashes and dots (`Meta-Llama-3.1-70B-Instruct`).
_LONG_RUN = re.compile(r"[A-Za-z0-9]{16,}")
# aiohttp's LineTooLong quotes the start of the line without its header name: it can be any
# header's value, a key of any shape.
_TOO_LONG_EXCERPT = re.compile(r"(bytes when reading: ).+")
_MASK = "***"


def redact(text: str) -> str:
    """`text` with credential header values, bearer tokens, `sk-` keys, the credentials of
    http(s) URLs (`redacted_url`) and over-long line excerpts replaced by `***`."""
    text = _HEADER_VALUE.sub(r"\1\2***", text)
    text = _URL_IN_TEXT.sub(_redacted_match, text)
    text = _BEARER.sub(r"\1***", text)
    text = _SK_KEY.sub("sk-***", text)
    return _TOO_LONG_EXCERPT.sub(r"\1***", text)


# The request headers that carry a client's credential, in the order a tenant is named by them
# (`threads.tenant_digest`).
CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key")


def without_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` (the very credentials a request carried, whatever their
    form: `redact` knows only the shapes it can recognize) replaced by `***`, then `redact`ed."""
    for secret in secrets:
        if len(secret) >= _SHORTEST_SECRET:
            text = text.replace(secret, "***")
    return redact(text)


def sent_secrets(credentials: Mapping[str, str], api_key: str | None = None) -> list[str]:
    """The values of the credential headers a request carried (`credentials`, those alone: the
    configured `threads.credential_headers` and the headers that scope them), a scheme word
    such as `Bearer` left out, and the upstream's own `api_key`, longest first (a key inside
    another is masked with it)."""
    found = [api_key] if api_key else []
    for value in credentials.values():
        if value:
            scheme, _, token = value.partition(" ")
            found.append(token.strip() if token and scheme.isalpha() else value)
    return sorted(set(found), key=len, reverse=True)


# Shorter than this, a "secret" would mask ordinary words of an error text; no key is so short.
_SHORTEST_SECRET = 8


def _redacted_match(match: re.Match[str]) -> str:
    return redacted_url(match.group())


def redacted_url(url: str) -> str:
    """`url` with its userinfo password, every query value and each path segment that looks
    like a credential shown as `***` (a user name only when it looks like one itself). Text
    that is no `scheme://` URL comes back as it is."""
    parts = _URL_PARTS.fullmatch(url)
    if parts is None:
        return url
    scheme, authority, path, query, fragment = parts.groups()
    if query:
        query = "?" + _QUERY_VALUE.sub(r"\1***", query[1:])
    return scheme + _masked_authority(authority) + _masked_path(path) + (query or "") + (fragment or "")


def _masked_authority(authority: str) -> str:
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return authority
    user, colon, _ = userinfo.partition(":")
    if colon:
        return f"{user}:{_MASK}@{host}"
    return f"{_MASK if looks_like_credential(user) else user}@{host}"


def _masked_path(path: str) -> str:
    segments = path.split("/")
    labelled = [False] + [s.lower() in _KEY_LABELS for s in segments[:-1]]
    return "/".join(_MASK if segment and (after_label or looks_like_credential(segment)) else segment
                    for segment, after_label in zip(segments, labelled, strict=True))


def looks_like_credential(segment: str) -> bool:
    """Whether a URL segment is shaped like a key: a provider's key prefix, or a run of 16 or
    more letters and digits that mixes both (a random token, a hex digest)."""
    text = unquote(segment)
    if _KEY_PREFIX.match(text):
        return True
    return any(_mixes_letters_and_digits(run) for run in _LONG_RUN.findall(text))


def _mixes_letters_and_digits(run: str) -> bool:
    return not run.isdigit() and not run.isalpha()
