"""What a config reload changes: the keys whose values differ, and which of them wait for a restart.

Pure: two `Settings` in, a `ReloadPlan` out. The settings a running proxy switches to are the
new file's, except the keys in `RESTART_ONLY`, which keep their running values: each is bound
into something made once at start (the listening socket, aiohttp's body limit, the state store,
the log's format, the caches' sizes), and a changed one is reported instead (`restart_needed`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from proxy.settings import Settings

# Dotted keys (a section, or one key of it) that only a restart applies.
RESTART_ONLY = ("server", "state", "logging.format", "tokens.cache_entries")


@dataclass(frozen=True)
class ReloadPlan:
    applied: Settings  # what the proxy runs with from now on
    changed: tuple[str, ...]  # dotted keys applied with a new value
    restart_needed: tuple[str, ...]  # dotted keys whose new value waits for a restart

    @property
    def sections(self) -> tuple[str, ...]:
        """The top-level sections with a key in `changed`."""
        return tuple(dict.fromkeys(key.split(".", 1)[0] for key in self.changed))


def plan_reload(running: Settings, loaded: Settings) -> ReloadPlan:
    """`loaded` (a file read anew) as the proxy running with `running` can apply it."""
    applied = replace(
        loaded, server=running.server, state=running.state,
        logging=replace(loaded.logging, format=running.logging.format),
        tokens=replace(loaded.tokens, cache_entries=running.tokens.cache_entries))
    wanted = changed_keys(running, loaded)
    return ReloadPlan(applied, changed_keys(running, applied),
                      tuple(key for key in wanted if restart_only(key)))


def restart_only(key: str) -> bool:
    return any(key == held or key.startswith(held + ".") for held in RESTART_ONLY)


def changed_keys(before: Settings, after: Settings) -> tuple[str, ...]:
    """The dotted keys whose values differ (a list is one value: `routes`, `threads.headers`),
    by section in the file reference's order, the running ones before the added ones; a profile
    or upstream added or removed is one key (`models.<pattern>`, `upstreams.<name>`), profiles
    put in another order the whole section (`models`)."""
    after_data = plain(after)
    old, new = dict(_leaves(plain(before))), dict(_leaves(after_data))
    sections = {name: n for n, name in enumerate(after_data)}
    paths = sorted(list(old) + [path for path in new if path not in old],
                   key=lambda path: sections[path[0]])
    changed = [path for path in paths if old.get(path, _ABSENT) != new.get(path, _ABSENT)]
    whole = {path for path in changed if path not in old or path not in new}
    if _reordered(before, after):  # the first matching glob wins: the order is a value too
        changed.insert(0, ("models",))
        whole.add(("models",))
        changed.sort(key=lambda path: sections[path[0]])
    return tuple(".".join(path) for path in changed
                 if not any(path[:n] in whole for n in range(1, len(path))))


def _reordered(before: Settings, after: Settings) -> bool:
    """Whether the profiles both files have come in another order (`Settings.profile` takes
    the first whose glob matches), which a comparison by pattern does not see."""
    kept = {p.pattern for p in before.models} & {p.pattern for p in after.models}
    return ([p.pattern for p in before.models if p.pattern in kept]
            != [p.pattern for p in after.models if p.pattern in kept])


def digest(settings: Settings) -> str:
    """A short fingerprint of the settings in force, for the log and the metrics: equal
    settings, equal digest. (A hash prefix: a secret in them cannot be read back from it.)"""
    return hashlib.sha256(repr(plain(settings)).encode()).hexdigest()[:12]


def plain(settings: Settings) -> dict[str, Any]:
    """The settings as nested plain data keyed as the file is (models by pattern, upstreams by
    name), secrets as they are: what `changed_keys` compares."""
    data = asdict(settings)
    del data["warnings"]
    data["upstreams"] = {name: {k: v for k, v in u.items() if k != "name"}
                         for name, u in data["upstreams"].items()}
    data["models"] = {p.pattern: {k: v for k, v in asdict(p).items() if k != "pattern"}
                      for p in settings.models}
    return data


_ABSENT, _SECTION = object(), object()


def _leaves(data: Mapping[str, Any],
            prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of every key; a mapping is an entry of its own as well."""
    for key, value in data.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            yield path, _SECTION
            yield from _leaves(value, path)
        else:
            yield path, value
