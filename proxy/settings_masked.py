"""The settings as `check-config` prints them: every secret masked.

Split from `proxy/settings.py`; `proxy.settings` re-exports both names. `redacted_url` (from
`proxy.redaction`) also serves the settings' own problems about a base_url. Beyond the keys
known to hold secrets (api_key, a base_url's password, query and key-shaped path segments),
every text value goes through the log redaction: a key pasted under a text key that accepts
anything (a model name, a path) is masked too.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from proxy.redaction import redact, redacted_url

if TYPE_CHECKING:
    from proxy.settings import Settings

__all__ = ["masked", "redacted_url"]


def masked(settings: Settings) -> dict[str, Any]:
    """The resolved settings as plain data with every secret replaced, for `check-config`."""
    data = asdict(settings)
    del data["warnings"]
    for upstream in data["upstreams"].values():
        del upstream["name"]  # the mapping's key already: printed, it would be an unknown key
        upstream["base_url"] = redacted_url(upstream["base_url"])
        if upstream.get("api_key"):
            key = upstream["api_key"]
            upstream["api_key"] = f"{key[:3]}***" if len(key) > 12 else "***"
    data["state"]["redis"]["url"] = redacted_url(data["state"]["redis"]["url"])
    data["routes"] = [asdict(r) for r in settings.routes]
    data["models"] = {p.pattern: {k: v for k, v in asdict(p).items() if k != "pattern"}
                      for p in settings.models}
    return _redacted(data)


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted(item) for item in value)
    return value
