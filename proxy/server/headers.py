"""Which headers cross the proxy, in each direction.

Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and never cross; lengths and
encodings are recomputed by whoever writes the body. Credentials are replaced when the upstream
has its own key.

Two request headers describe how the client sent its body, which the proxy has already read:
`Content-Encoding` (aiohttp inflates gzip/deflate bodies as it reads them, so the bytes that go
on are plain) and `Expect: 100-continue` (answered by the proxy; forwarded, it would make the
upstream call wait for an interim answer that some servers never send).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from multidict import CIMultiDict, CIMultiDictProxy

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
})
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "content-encoding", "expect"}
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "server", "date"}
_CREDENTIALS = ("authorization", "api-key", "x-api-key")


def upstream_request_headers(client: Mapping[str, str] | CIMultiDictProxy[str], *,
                             api_key: str | None, drop: Iterable[str] = (),
                             identity_encoding: bool = False) -> CIMultiDict[str]:
    """Headers to send upstream: the client's, minus hop-by-hop, with the upstream's key."""
    dropped = _REQUEST_DROP | {d.lower() for d in drop} | _connection_tokens(client)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in client.items():
        lower = name.lower()
        if lower in dropped or (api_key and lower in _CREDENTIALS):
            continue
        out.add(name, value)
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    if identity_encoding:
        # The proxy reads these bodies (usage); a compressed answer would have to be inflated.
        out["Accept-Encoding"] = "identity"
    return out


def client_response_headers(upstream: Mapping[str, str] | CIMultiDictProxy[str],
                            extra: Mapping[str, str] | None = None) -> CIMultiDict[str]:
    dropped = _RESPONSE_DROP | _connection_tokens(upstream)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.items():
        if name.lower() not in dropped:
            out.add(name, value)
    for name, value in (extra or {}).items():
        out[name] = value
    return out


def _connection_tokens(headers: Mapping[str, str] | CIMultiDictProxy[str]) -> set[str]:
    """Headers named in `Connection:` are hop-by-hop too."""
    value = headers.get("connection") or headers.get("Connection") or ""
    return {t.strip().lower() for t in value.split(",") if t.strip()}
