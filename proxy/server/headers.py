"""Which headers cross the proxy, in each direction.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and never cross; lengths and
encodings are recomputed by whoever writes the body. Credentials are replaced when the upstream
has its own key, and the headers that scope them (`OpenAI-Organization`, `OpenAI-Project`)
leave with them.

Two request headers describe how the client sent its body, which the proxy has already read:
`Content-Encoding` (`client_body.py` inflates a compressed body, so the bytes that go on are
plain) and `Expect: 100-continue` (answered by the proxy; forwarded, it would make the
upstream call wait for an interim answer that some servers never send).

An idempotency key goes upstream with the body it was made for. The client made its key for its
own body; a body the proxy changed (compacted, fixed after a rejection, the internal retry's)
is another request, and an upstream that honours keys would answer it with the first attempt's
cached answer or refuse the key reused with other parameters. Such a body goes with a key
derived from the client's and from that body (`bound_idempotency_key`): distinct from the
client's, and the same for the same body, so the client's own retry of the request, which the
proxy turns into the same body, is still one request to the upstream.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from functools import lru_cache

from aiohttp import hdrs
from multidict import CIMultiDict, CIMultiDictProxy, istr

from proxy.redaction import CREDENTIAL_HEADERS

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
})
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "content-encoding", "expect"}
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "server", "date"}
# What scopes the client's credential: beside the upstream's key it would name an organization
# or project that key may not belong to, and OpenAI refuses the request (401
# `mismatched_organization`). Replaced with the credential.
CREDENTIAL_SCOPE = ("openai-organization", "openai-project")
# Stripe's and the IETF draft's name, and the `X-` form some gateways read.
IDEMPOTENCY_KEYS = (istr("Idempotency-Key"), istr("X-Idempotency-Key"))
_BOUND_KEYS = uuid.UUID("5f3c8a1e-2b7d-4f0a-9c61-0d4e8b2a7f35")  # the namespace of derived keys


def upstream_request_headers(client: Mapping[str, str] | CIMultiDictProxy[str], *,
                             api_key: str | None, drop: Iterable[str] = (),
                             identity_encoding: bool = False) -> CIMultiDict[str]:
    """Headers to send upstream: the client's, minus hop-by-hop, with the upstream's key."""
    out = _forwarded(client, _request_drop(tuple(drop), bool(api_key)))
    # Named by aiohttp's `istr` constants: multidict finds those without folding their case.
    if api_key:
        out[hdrs.AUTHORIZATION] = f"Bearer {api_key}"
    if identity_encoding:
        # The proxy reads these bodies (usage); a compressed answer would have to be inflated.
        out[hdrs.ACCEPT_ENCODING] = "identity"
    return out


def bind_idempotency_keys(headers: CIMultiDict[str], body: bytes) -> None:
    """In place: the client's idempotency keys made `bound_idempotency_key`s for `body`, a body
    the proxy changed."""
    for name in IDEMPOTENCY_KEYS:
        key = headers.get(name)
        if key is not None:
            headers[name] = bound_idempotency_key(key, body)


def bound_idempotency_key(key: str, body: bytes) -> str:
    """The key for `body` sent on behalf of a client request that carried `key`: a UUID
    (version 5, of the key and the body's digest), the form keys are made in, which any
    server's length and character rules accept; a key sent as a Structured Field string
    (the IETF draft's `"..."`) gets one too."""
    quoted = len(key) >= 2 and key[0] == key[-1] == '"'
    name = f"{key[1:-1] if quoted else key}\n{hashlib.sha256(body).hexdigest()}"
    derived = str(uuid.uuid5(_BOUND_KEYS, name))
    return f'"{derived}"' if quoted else derived


def client_response_headers(upstream: Mapping[str, str] | CIMultiDictProxy[str],
                            extra: Mapping[str, str] | None = None) -> CIMultiDict[str]:
    return for_client(CIMultiDict(upstream), upstream, extra)


def for_client(copy: CIMultiDict[str], upstream: Mapping[str, str] | CIMultiDictProxy[str],
               extra: Mapping[str, str] | None = None) -> CIMultiDict[str]:
    """`copy`, a copy of `upstream` (a response's own headers, made as it was built), made
    what `client_response_headers` returns, in place: one copy of the headers less."""
    _strip(copy, upstream, _RESPONSE_DROP)
    if extra:
        copy.update(extra)  # replaces a header of the same name in place, as `out[name] = value`
    return copy


@lru_cache(maxsize=64)
def _request_drop(drop: tuple[str, ...], replace_credentials: bool) -> frozenset[str]:
    """The request headers never forwarded, for one setting of `drop`: built once, not per
    request."""
    names = _REQUEST_DROP | {d.lower() for d in drop}
    return names | {*CREDENTIAL_HEADERS, *CREDENTIAL_SCOPE} if replace_credentials else names


def _forwarded(headers: Mapping[str, str] | CIMultiDictProxy[str],
               dropped: frozenset[str]) -> CIMultiDict[str]:
    """A copy of `headers`, order and case kept, without the names in `dropped` (lower case)
    and those its `Connection` header names (hop-by-hop too)."""
    return _strip(CIMultiDict(headers), headers, dropped)


def _strip(out: CIMultiDict[str], headers: Mapping[str, str] | CIMultiDictProxy[str],
           dropped: frozenset[str]) -> CIMultiDict[str]:
    """`out`, a copy of `headers`, without what `_forwarded` leaves out."""
    # The names to drop are found in C: only the few names both present and dropped (Host,
    # Content-Length...) cost a step here, not every header.
    if _CASELESS_KEY_SETS and type(headers) in _CASELESS:
        # The keys view meets `dropped` ignoring case, without a lower-cased copy of every
        # name (that copy was half the cost of the whole function).
        if "connection" in headers:
            dropped = dropped | _connection_tokens(headers)
            present = headers.keys() & dropped
        else:
            # Clients send the same header names on every request: the names found for one
            # list of names are remembered (meeting the keys view costs twice the lookup).
            # Without a Connection header, what is dropped depends on the names alone.
            names = tuple(headers)
            present = _PRESENT.get((names, dropped))
            if present is None:
                # As `istr`: multidict finds those without folding their case again.
                present = frozenset(map(istr, headers.keys() & dropped))
                if sum(map(len, names)) <= _MAX_NAMES_CHARS:  # bounded: names are the client's
                    if len(_PRESENT) >= _MAX_PRESENT:
                        _PRESENT.clear()
                    _PRESENT[names, dropped] = present
    else:
        names = set(map(str.lower, headers.keys()))
        if "connection" in names:
            dropped = dropped | _connection_tokens(headers)
        present = dropped.intersection(names)
    for name in present:
        del out[name]
    return out


_CASELESS = frozenset({CIMultiDict, CIMultiDictProxy})
# The names to drop from a list of header names (in order, repeats kept), for one set of
# dropped names: a few hundred lists of names up to 4 KB in all at most.
_PRESENT: dict[tuple[tuple[str, ...], frozenset[str]], frozenset[istr]] = {}
_MAX_PRESENT = 256
_MAX_NAMES_CHARS = 4096
# Older multidict releases compared keys views case-sensitively: those take the general way.
_CASELESS_KEY_SETS = CIMultiDict({"Host": ""}).keys() & {"host"} == {"Host"}


def _connection_tokens(headers: Mapping[str, str] | CIMultiDictProxy[str]) -> set[str]:
    # Every Connection line counts: repeated lines are one comma-separated list (RFC 9110 §5.3).
    getall = getattr(headers, "getall", None)
    values = (getall("connection", ()) if getall is not None
              else (headers.get("connection") or headers.get("Connection") or "",))
    return {t.strip().lower() for value in values for t in value.split(",") if t.strip()}
