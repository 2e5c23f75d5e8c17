"""The small sections of the configuration: `threads`, `state`, `logging` and `tokens`.

Split from `proxy/settings.py` by size; `proxy.settings` re-exports every name here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.redaction import CREDENTIAL_HEADERS, redacted_url
from proxy.settings_reader import Reader, home_expanded, not_empty, shown

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REDIS_URL = re.compile(r"(?i)(rediss?://[^/?#\s]+|unix://[^\s]*/[^\s]+)")


@dataclass(frozen=True)
class ThreadSettings:
    headers: tuple[str, ...] = ("x-thread-id", "session_id")
    body_fields: tuple[str, ...] = ("prompt_cache_key", "metadata.thread_id")
    fallback: str = "fingerprint"
    forward_headers: bool = True
    # The request headers that carry a client's credential, in the order they name its tenant
    # (`proxy.threads.tenant_digest`); a summary made for the client carries them.
    credential_headers: tuple[str, ...] = CREDENTIAL_HEADERS


@dataclass(frozen=True)
class RedisSettings:
    """`state.redis`: the server that `state.backend: redis` keeps every instance's state on."""

    url: str = "redis://127.0.0.1:6379/0"  # redis://, rediss:// (TLS) or unix://
    prefix: str = "compaction-proxy:"  # every key the proxy writes starts with it
    timeout_s: float = 5.0  # connect and each command
    lease_s: float = 30.0  # a thread's compaction lease, renewed while it runs


@dataclass(frozen=True)
class StateSettings:
    backend: str = "sqlite"
    path: str = "./data"
    check_on_start: bool = True  # PRAGMA quick_check before serving (proxy/store/damage.py)
    # A thread idle longer than this is removed whole (0: kept for ever). 30: the upstream keeps
    # stored responses that long (`proxy.store.sqlite_db.ORIGINS_KEPT_S`), and a client that
    # comes back later pays one summary, which a thread's state exists to save.
    retention_days: float = 30.0
    redis: RedisSettings = RedisSettings()

    @property
    def retention_s(self) -> float:
        """`retention_days` in seconds; 0 keeps every thread."""
        return self.retention_days * 86_400.0


@dataclass(frozen=True)
class LoggingSettings:
    format: str = "json"
    level: str = "info"


@dataclass(frozen=True)
class TokenSettings:
    safety_margin: float = 0.03
    cache_entries: int = 200_000
    # False: a chat request the proxy has nothing to do for goes up uncounted
    # (`proxy/server/untouched.py`); true: every request is counted and its answer anchored.
    count_every_request: bool = False


def parse_threads(r: Reader) -> ThreadSettings:
    d = ThreadSettings()
    s = ThreadSettings(
        headers=tuple(h.lower() for h in r.strings("headers", d.headers, _HEADER_NAME.fullmatch,
                                                   "is not an HTTP header name")),
        body_fields=r.strings("body_fields", d.body_fields, _dotted_path,
                              "is not a dotted path (names joined by single dots)"),
        fallback=r.string("fallback", d.fallback, choices=("fingerprint", "none")),
        forward_headers=r.boolean("forward_headers", d.forward_headers),
        credential_headers=_credential_headers(r, d.credential_headers),
    )
    r.finish()
    return s


def _credential_headers(r: Reader, default: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(h.lower() for h in r.strings(
        "credential_headers", default, _HEADER_NAME.fullmatch, "is not an HTTP header name")))
    if not names:
        # Every client would be one tenant, sharing every thread id's state.
        r.problem("credential_headers", "expected at least one header name (the default: "
                  + ", ".join(default) + ")")
        return default
    return names


def _dotted_path(path: str) -> bool:
    return all(path.split("."))


def parse_state(r: Reader, env: Mapping[str, str]) -> StateSettings:
    path = not_empty(r, "path", StateSettings.path,
                      "an empty path is the working directory; write . to mean that")
    s = StateSettings(
        backend=r.string("backend", StateSettings.backend, choices=("sqlite", "redis")),
        path=_home_expanded(r, _no_nul(r, path), env.get("HOME", "")),
        check_on_start=r.boolean("check_on_start", StateSettings.check_on_start),
        retention_days=r.number("retention_days", StateSettings.retention_days, minimum=0.0),
        redis=parse_redis(r.mapping("redis")),
    )
    r.finish()
    return s


def parse_redis(r: Reader) -> RedisSettings:
    d = RedisSettings()
    s = RedisSettings(
        url=_redis_url(r, r.string("url", d.url)),
        # Empty, the proxy's keys would mix with whatever else the server holds.
        prefix=not_empty(r, "prefix", d.prefix, "keys without a prefix mix with other data"),
        timeout_s=r.number("timeout_s", d.timeout_s, minimum=0.05),
        lease_s=r.number("lease_s", d.lease_s, minimum=1.0),
    )
    r.finish()
    return s


def _redis_url(r: Reader, url: str) -> str:
    if not _REDIS_URL.match(url):
        # Shown masked: the URL may carry the server's password.
        r.problem("url", f"{shown(redacted_url(url))} is not a redis://, rediss:// or unix:// URL")
    return url


def _no_nul(r: Reader, path: str) -> str:
    # YAML's "\0" escape makes one; no file system takes it, and opening the state would fail.
    if "\0" in path:
        r.problem("path", f"{shown(path)} holds a NUL character, which no path may hold")
    return path


def _home_expanded(r: Reader, path: str, home: str) -> str:
    """`~/...` as a shell reads it: left as written, the state went to a directory named `~`."""
    expanded = home_expanded(path, home)
    if expanded is None:
        r.problem("path", f"{shown(path)} starts with ~, which only ~/ with HOME set expands: "
                          "write the full path")
        return path
    return expanded


def parse_logging(r: Reader) -> LoggingSettings:
    s = LoggingSettings(
        format=r.string("format", LoggingSettings.format, choices=("json", "console")),
        level=_level(r),
    )
    r.finish()
    return s


def _level(r: Reader) -> str:
    """Any case: Python's own logging writes the levels in capitals."""
    choices = ("debug", "info", "warning", "error")
    level = r.string("level", LoggingSettings.level)
    if level.lower() not in choices:
        r.problem("level", f"must be one of {', '.join(choices)}, got {shown(level)}")
        return LoggingSettings.level
    return level.lower()


def parse_tokens(r: Reader) -> TokenSettings:
    s = TokenSettings(
        safety_margin=r.number("safety_margin", TokenSettings.safety_margin, 0.0, 1.0),
        cache_entries=r.integer("cache_entries", TokenSettings.cache_entries, 1000),
        count_every_request=r.boolean("count_every_request", TokenSettings.count_every_request),
    )
    r.finish()
    return s
