"""The proxy's configuration: frozen dataclasses and the one parser that builds them.

Settings are parsed once at start (`load_settings`) and passed down; nothing reads module
globals. Every problem is reported with its dotted path (`ConfigError`), all at once.
The documented reference of every key is `config/proxy.yaml`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy.settings_compaction import (DEFAULT_EXPLORATION_TOOLS, DEFAULT_FILE_TOOLS,
                                       DEFAULT_PLAN_TOOLS, DEFAULT_SHELL_TOOLS, BreakerSettings, CollapseSettings,
                                       CompactionSettings, MicrocompactSettings,
                                       RestoreSettings, SummarizerSettings, TruncateSettings,
                                       parse_compaction)
from proxy.settings_masked import masked, redacted_url
from proxy.settings_reader import (ConfigError, Reader, environment, interpolate, not_empty,
                                   shown)
from proxy.settings_sections import (LoggingSettings, RedisSettings, StateSettings, ThreadSettings,
                                     TokenSettings, parse_logging, parse_state, parse_threads,
                                     parse_tokens)
from proxy.settings_yaml import read_yaml

__all__ = ["DEFAULT_EXPLORATION_TOOLS", "DEFAULT_FILE_TOOLS", "DEFAULT_PLAN_TOOLS",
           "DEFAULT_SHELL_TOOLS",
           "BreakerSettings", "CollapseSettings", "CompactionSettings", "ConfigError",
           "LoggingSettings", "MicrocompactSettings", "RedisSettings", "RestoreSettings", "Settings",
           "StateSettings",
           "SummarizerSettings", "ThreadSettings", "TokenSettings", "TruncateSettings",
           "host_port", "listen_host", "load_settings", "load_state_settings", "masked",
           "parse_settings",
           "redacted_url"]

DEFAULT_CONFIG_PATH = "config/proxy.yaml"
# RFC 9110's token: the characters a header name may have.
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8787
    max_body_mb: int = 64
    max_upload_mb: int = 512  # pass-through bodies streamed upstream, not held (uploads)
    shutdown_grace_s: float = 30.0
    upstream_pool_size: int = 256
    recent_cache_mb: int = 16

    @property
    def max_body_bytes(self) -> int:
        return self.max_body_mb * 1024 * 1024

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024


@dataclass(frozen=True)
class UpstreamSettings:
    name: str
    base_url: str
    api_key: str | None = None
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    api: str = "chat"
    stream_usage: bool = True  # ask for stream_options.include_usage (SPEC §6)


@dataclass(frozen=True)
class Route:
    model: str
    upstream: str

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.model)


@dataclass(frozen=True)
class ModelProfile:
    pattern: str
    max_input_tokens: int | None = None
    context_window: int | None = None
    tokenizer: str | None = None
    image_rule: str | None = None  # a family of tokens/images.py RULES (checked by the CLI)
    trigger_ratio: float | None = None
    keep_ratio: float | None = None


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    upstreams: Mapping[str, UpstreamSettings] = field(default_factory=dict)
    routes: tuple[Route, ...] = ()
    models: tuple[ModelProfile, ...] = ()
    threads: ThreadSettings = field(default_factory=ThreadSettings)
    state: StateSettings = field(default_factory=StateSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    tokens: TokenSettings = field(default_factory=TokenSettings)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    # Things that are allowed but probably not meant, `path: text`, for the CLI to show.
    warnings: tuple[str, ...] = ()

    def route(self, model: str) -> UpstreamSettings | None:
        """The upstream of the first route whose glob matches `model`."""
        for route in self.routes:
            if route.matches(model):
                return self.upstreams[route.upstream]
        return None

    def profile(self, model: str) -> ModelProfile | None:
        """The first model profile whose name or glob matches; exact names win over globs."""
        for profile in self.models:
            if profile.pattern == model:
                return profile
        for profile in self.models:
            if fnmatch.fnmatchcase(model, profile.pattern):
                return profile
        return None

    def with_overrides(self, host: str | None = None, port: int | None = None) -> Settings:
        server = replace(self.server, host=host or self.server.host,
                         port=self.server.port if port is None else port)
        return replace(self, server=server)


def load_settings(path: str | Path, env: Mapping[str, str] | None = None) -> Settings:
    """Read, interpolate and validate a YAML config file; raises `ConfigError`, and nothing
    else, for every way the file can be wrong."""
    return _loaded(path, env, parse_settings)


def load_state_settings(path: str | Path, env: Mapping[str, str] | None = None) -> Settings:
    """Only the file's `state` section, the rest left at its defaults: what the commands that
    read the state database (`threads`, `inspect`, `check-state`) need. A problem elsewhere in
    the file (an upstream key's variable unset in an operator's shell) does not stop them."""
    return _loaded(path, env, _state_only)


def _loaded(path: str | Path, env: Mapping[str, str] | None,
            parse: Callable[[Any, Mapping[str, str]], Settings]) -> Settings:
    raw = read_yaml(path)
    try:
        return parse(raw, environment() if env is None else env)
    except RecursionError:
        raise ConfigError([f"<file>: {path} nests too deeply"]) from None


def _state_only(raw: Any, env: Mapping[str, str]) -> Settings:
    section = raw.get("state") if isinstance(raw, Mapping) else None
    problems: list[str] = []
    root = Reader(interpolate({} if section is None else {"state": section}, env, "", problems),
                  "", problems)
    state = parse_state(root.mapping("state"), env)
    if problems:
        raise ConfigError(problems)
    return Settings(state=state)


def parse_settings(raw: Any, env: Mapping[str, str]) -> Settings:
    problems: list[str] = []
    warnings: list[str] = []
    root = Reader(interpolate(raw or {}, env, "", problems), "", problems)
    settings = Settings(
        server=_server(root.mapping("server")),
        upstreams=_upstreams(root.mapping("upstreams"), warnings),
        routes=(),
        models=_models(root.mapping("models"), warnings),
        threads=parse_threads(root.mapping("threads")),
        state=parse_state(root.mapping("state"), env),
        logging=parse_logging(root.mapping("logging")),
        tokens=parse_tokens(root.mapping("tokens")),
        compaction=parse_compaction(root.mapping("compaction")),
        warnings=tuple(warnings),
    )
    settings = replace(settings, routes=_routes(root, settings.upstreams))
    _check_references(settings, problems)
    root.finish()
    if problems:
        raise ConfigError(problems)
    return settings


def _server(r: Reader) -> ServerSettings:
    s = ServerSettings(
        host=_listen_host(r),
        port=r.integer("port", ServerSettings.port, 0, 65535),
        max_body_mb=r.integer("max_body_mb", ServerSettings.max_body_mb, 1, 4096),
        max_upload_mb=r.integer("max_upload_mb", ServerSettings.max_upload_mb, 1, 1024 * 1024),
        shutdown_grace_s=r.number("shutdown_grace_s", ServerSettings.shutdown_grace_s, 0),
        upstream_pool_size=r.integer("upstream_pool_size", ServerSettings.upstream_pool_size, 1),
        recent_cache_mb=r.integer("recent_cache_mb", ServerSettings.recent_cache_mb, 0),
    )
    if s.max_upload_mb < s.max_body_mb:
        r.problem("max_upload_mb", f"must be at least server.max_body_mb ({s.max_body_mb}): "
                  "only bodies larger than that are streamed as uploads")
    r.finish()
    return s


def listen_host(text: str) -> str:
    """The address to bind: `[::1]`, as a URL writes an IPv6 address, is `::1` (bound as it
    is written, the brackets made it a name no resolver knows)."""
    return text[1:-1].strip() if text.startswith("[") and text.endswith("]") else text


def host_port(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets (`::1:8787` reads as an
    address without a port)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen_host(r: Reader) -> str:
    host = listen_host(not_empty(r, "host", ServerSettings.host, _EMPTY_HOST))
    if not host:  # `[]`
        r.problem("host", f"must not be empty: {_EMPTY_HOST}")
        return ServerSettings.host
    return host


_EMPTY_HOST = "an empty host listens on every interface; write 0.0.0.0 to mean that"


def _upstreams(r: Reader, warnings: list[str]) -> dict[str, UpstreamSettings]:
    upstreams = {}
    for name in list(r.raw):
        u = r.mapping(str(name))
        upstreams[str(name)] = UpstreamSettings(
            name=str(name),
            base_url=_base_url(u, warnings),
            api_key=_api_key(u, str(name), warnings),
            timeout_s=u.number("timeout_s", UpstreamSettings.timeout_s, 0.1),
            connect_timeout_s=u.number("connect_timeout_s", UpstreamSettings.connect_timeout_s, 0.1),
            api=u.string("api", "chat", choices=("chat", "responses")),
            stream_usage=u.boolean("stream_usage", UpstreamSettings.stream_usage),
        )
        u.finish()
    if not upstreams and not r.shapeless:
        r.problems.append("upstreams: at least one upstream is required, such as "
                          "{openai: {base_url: 'https://api.openai.com/v1'}}")
    return upstreams


def _base_url(u: Reader, warnings: list[str]) -> str:
    base_url = u.string("base_url")
    # An empty one too (`${URL}` with URL set empty): every request would fail. A missing one
    # is already reported, and `problem` keeps one a key.
    if not _is_http_url(base_url):
        u.problem("base_url", f"must be an http(s) URL, got {shown(redacted_url(base_url))}")
    elif base_url and "@" in urlsplit(base_url).netloc:
        # aiohttp cannot send URL credentials beside an Authorization header, and every
        # request here carries one (the client's, or api_key's).
        u.problem("base_url", f"must not carry credentials (user:password@), got "
                              f"{shown(redacted_url(base_url))}; set api_key instead")
    elif urlsplit(base_url).path.strip("/") == "":
        # The client's path goes below the base without its /v1: a base of http://host:9000
        # sends /chat/completions, which most servers answer with a 404.
        warnings.append(f"{u.where('base_url')}: has no path, so a client's /v1/chat/completions "
                        f"goes to /chat/completions upstream; most OpenAI-compatible servers "
                        f"need the /v1 base (write .../v1), unless yours answers at its root")
    elif endpoint := _endpoint_named(urlsplit(base_url).path):
        # An endpoint's URL pasted from a provider's page: every request would be a 404.
        warnings.append(f"{u.where('base_url')}: ends with the endpoint {endpoint}, but each "
                        f"client's path goes below the base_url (a client's /v1{endpoint} would "
                        f"go to ...{endpoint}{endpoint}): write the /v1 base without {endpoint}")
    return base_url.rstrip("/")


_ENDPOINTS = ("/chat/completions", "/responses", "/completions", "/embeddings")


def _endpoint_named(path: str) -> str | None:
    path = path.rstrip("/")
    return next((e for e in _ENDPOINTS if path.endswith(e)), None)


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number up to 65535, a bad IPv6 literal `http://[::1`
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port != 0


def _api_key(u: Reader, upstream: str, warnings: list[str]) -> str | None:
    key = u.string("api_key", None)
    if key is not None and not key.strip():
        # Most often `${KEY}` or `${KEY:-}` with KEY empty or unset: worth a word, since
        # it silently changes whose credential the upstream sees.
        warnings.append(f"{u.where('api_key')}: is empty, so upstream {upstream!r} gets each "
                        f"client's own Authorization header (omit the key to mean that)")
        return None
    if key is not None and ("\n" in key or "\r" in key):
        u.problem("api_key", "contains a line break (a trailing newline from a secret file?)")
        return None
    return key


def _routes(root: Reader, upstreams: Mapping[str, UpstreamSettings]) -> tuple[Route, ...]:
    raw = root.get("routes", None)
    if raw is None:
        # One upstream and no routes: everything goes there. With more, no route would be a
        # 404 for every request.
        if len(upstreams) > 1:
            root.problem("routes", f"is required with more than one upstream "
                                   f"({', '.join(sorted(upstreams))})")
        return (Route("*", next(iter(upstreams))),) if len(upstreams) == 1 else ()
    if not isinstance(raw, list) or not raw:
        root.problem("routes", "expected a non-empty list of {model, upstream}")
        return ()
    routes = []
    for i, item in enumerate(raw):
        r = Reader(item, f"routes[{i}]", root.problems)
        route = Route(model=r.string("model"), upstream=r.string("upstream"))
        if route.upstream not in upstreams:  # "" too: it would fail every request it routes
            r.problem("upstream", f"no upstream named {shown(route.upstream)} "
                                  f"(known: {', '.join(sorted(upstreams)) or 'none'})")
        r.finish()
        routes.append(route)
    return tuple(routes)


def _models(r: Reader, warnings: list[str]) -> tuple[ModelProfile, ...]:
    profiles = []
    for pattern in list(r.raw):
        m = r.mapping(str(pattern))
        profile = ModelProfile(
            pattern=str(pattern),
            max_input_tokens=m.optional_integer("max_input_tokens", 64),
            context_window=m.optional_integer("context_window", 64),
            tokenizer=m.string("tokenizer", None),
            image_rule=m.string("image_rule", None),
            trigger_ratio=m.optional_number("trigger_ratio", 0.05, 1.0),
            keep_ratio=m.optional_number("keep_ratio", 0.0, 0.9),
        )
        window, input_tokens = profile.context_window, profile.max_input_tokens
        if window and input_tokens and input_tokens > window:
            m.problem("max_input_tokens",
                      f"must not exceed context_window ({window}), got {input_tokens}")
        m.finish()
        profiles.append(profile)
    _warn_shadowed_globs(r, [p.pattern for p in profiles], warnings)
    return tuple(profiles)


def _warn_shadowed_globs(r: Reader, patterns: list[str], warnings: list[str]) -> None:
    """Globs are tried in order, the first match wins: a glob after a `prefix*` that already
    takes every model it could match is never used (`gpt-4o-mini*` after `gpt-4o*`)."""
    globs = [p for p in patterns if _GLOB_CHARS.search(p)]
    for n, later in enumerate(globs):
        fixed = _GLOB_CHARS.split(later, 1)[0]  # every match of `later` starts with this
        for earlier in globs[:n]:
            prefix = earlier[:-1]
            if earlier.endswith("*") and not _GLOB_CHARS.search(prefix) and fixed.startswith(prefix):
                warnings.append(f"{r.where(later)}: never used: every model it matches is taken "
                                f"by {earlier!r}, listed before it (the first matching glob wins; "
                                f"list the narrower one first)")
                break


def _check_references(s: Settings, problems: list[str]) -> None:
    upstream = s.compaction.summarizer.upstream
    if upstream is not None and upstream not in s.upstreams:
        problems.append(f"compaction.summarizer.upstream: no upstream named {shown(upstream)}")
    for p in s.models:
        # A profile's ratio stands with the section's other one: a kept tail at or above the
        # trigger makes every compaction fail its post-check.
        trigger = s.compaction.trigger_ratio if p.trigger_ratio is None else p.trigger_ratio
        keep = s.compaction.keep_ratio if p.keep_ratio is None else p.keep_ratio
        if (p.trigger_ratio is not None or p.keep_ratio is not None) and keep >= trigger:
            problems.append(f"models.{p.pattern}: keep_ratio ({keep:g}) must be smaller than "
                            f"trigger_ratio ({trigger:g})")
