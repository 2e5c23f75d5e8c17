"""A small typed reader over a parsed YAML mapping that collects problems by dotted path.

`settings.py` describes the configuration; this module only knows how to read one value,
check it, remember that the key was seen, and report everything wrong at once.

A problem never quotes a value that could be a secret (an API key put under the wrong key, or
a `${VAR}` naming the wrong variable): a type error names the type of a string, never its
text, and a text key (a choice, a name) quotes its value only through `shown`.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import yaml

from proxy.redaction import redact

T = TypeVar("T")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# What `_substitute` replaces, first match wins at each `$`: the escape `$${` (a literal `${`),
# a reference, and any other `${...}` (another shell form, `${VAR-x}` or `${VAR:?}`, a
# malformed name): that one is a problem, since the text would otherwise go on as it is, an
# `api_key: ${KEY-x}` upstream as the credential.
_ENV_TOKEN = re.compile(r"\$\$\{|" + _ENV_REF.pattern + r"|\$\{[^}]*\}?")
_SUPPORTED = "write ${VAR} or ${VAR:-default}, or $${ for a literal ${"
# Every YAML int, float and boolean is spelled with these characters. Text with any other
# (spaces, quotes, brackets, '#', '&', '!', a line break) is never read as YAML, so an
# environment value cannot bring structure into the config.
_SCALAR_CHARS = re.compile(r"[-+.:_0-9A-Za-z]+")
_MISSING = object()
# A credential's shape, as a whole word of the value: a long run of key characters mixing
# letters and digits (a model name that long is masked too, a small price for never printing
# a key).
_TOKEN_LIKE = re.compile(r"(?<!\S)(?=\S*[0-9])(?=\S*[A-Za-z])[A-Za-z0-9_+/=.-]{20,}(?!\S)")
_SHOWN_CHARS = 60


class ConfigError(Exception):
    """Every problem of a configuration, one `path: problem` per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class WholeReference(str):
    """A string that was exactly one `${VAR}` (or `${VAR:-default}`) reference. Where the
    config expects a number or a boolean it is read as YAML reads an unquoted scalar
    (`typed_scalar`); everywhere else, secrets included, it stays the text it is."""


def interpolate(value: Any, env: Mapping[str, str], path: str, problems: list[str],
                _parents: frozenset[int] = frozenset()) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string of a parsed YAML tree."""
    if isinstance(value, str):
        return _substitute(value, env, path, problems)
    if not isinstance(value, (Mapping, list)):
        return value
    if id(value) in _parents:
        # `a: &a [*a]`: PyYAML builds a structure that contains itself.
        problems.append(f"{path or '<root>'}: a YAML alias refers to a node that contains it")
        return None
    parents = _parents | {id(value)}
    if isinstance(value, Mapping):
        return {k: interpolate(v, env, _join(path, str(k)), problems, parents)
                for k, v in value.items()}
    return [interpolate(v, env, f"{path}[{i}]", problems, parents) for i, v in enumerate(value)]


def _substitute(text: str, env: Mapping[str, str], path: str, problems: list[str]) -> str:
    def value_of(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if match.group() == "$${":
            return "${"
        if name is None or (default is not None and "${" in default):  # nested: not read
            problems.append(f"{path}: {_reference_shown(match.group())} is not a reference the "
                            f"proxy reads: {_SUPPORTED}")
            return match.group()
        # As in a shell (and docker compose): `:-` stands in for an unset or empty variable.
        if name in env and (env[name] or default is None):
            return env[name]
        if default is not None:
            return default
        problems.append(f"{path}: environment variable {name} is not set (export it, or give "
                        f"a default: ${{{name}:-value}})")
        return ""
    result = _ENV_TOKEN.sub(value_of, text)
    return WholeReference(result) if _ENV_REF.fullmatch(text) else result


def _reference_shown(reference: str) -> str:
    """A reference a problem quotes: what is inside the braces masked as `shown` masks text
    (a default there may be a key)."""
    inside = reference[2:].removesuffix("}")
    closing = "}" if reference.endswith("}") else ""
    return repr("${" + shown(inside, quoted=False) + closing)


def typed_scalar(text: str) -> Any:
    """`8080` -> 8080, `true` -> True, `1.5` -> 1.5, as YAML reads them unquoted. Any other
    text (empty, a date, `null`, a list or a mapping in YAML syntax) stays a string."""
    if not _SCALAR_CHARS.fullmatch(text):
        return str(text)
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):  # ValueError: an int of more than 4300 digits
        return str(text)
    return value if isinstance(value, (bool, int, float)) else str(text)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Reader:
    """Reads keys of one mapping; unknown keys are reported when `finish()` is called."""

    def __init__(self, raw: Any, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        # Of the wrong shape (or inside one): what its keys lack follows from that one problem.
        self.shapeless = raw is not None and not isinstance(raw, Mapping)
        if self.shapeless:
            problems.append(f"{path or '<root>'}: expected a mapping, got {type(raw).__name__}")
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        self.seen: set[str] = set()

    def where(self, key: str) -> str:
        return _join(self.path, key)

    def problem(self, key: str, text: str) -> None:
        if self.shapeless:  # its keys are missing because of the one problem already said
            return
        where = f"{self.where(key)}: "
        # One problem a key: an unset `${VAR}` is reported where it is read, and the empty
        # text it leaves would otherwise be reported again as the wrong type.
        if not any(p.startswith(where) for p in self.problems):
            self.problems.append(where + text)

    def get(self, key: str, default: Any = _MISSING) -> Any:
        self.seen.add(key)
        if key in self.raw and self.raw[key] is not None:
            return self.raw[key]
        if default is _MISSING:
            self.problem(key, "is required")
            return None
        return default

    def typed(self, key: str, default: T, kind: type | tuple[type, ...], name: str,
              check: Callable[[Any], str | None] | None = None) -> T:
        value = self.get(key, default)
        if isinstance(value, WholeReference):
            value = typed_scalar(value)
        if value is None:
            return default
        if isinstance(value, bool) and kind is not bool and bool not in _as_tuple(kind):
            self.problem(key, f"expected {name}, got a boolean")
            return default
        if kind is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, kind):
            self.problem(key, f"expected {name}, got {described(value)}")
            return default
        if check is not None and (text := check(value)) is not None:
            self.problem(key, text)
            return default
        return value

    def string(self, key: str, default: Any = _MISSING, choices: tuple[str, ...] = ()) -> Any:
        value = self.get(key, default)
        if value is None:
            return default if default is not _MISSING else ""
        if not isinstance(value, str):
            self.problem(key, f"expected a string, got {type(value).__name__}")
            return default if default is not _MISSING else ""
        if choices and value not in choices:
            self.problem(key, f"must be one of {', '.join(choices)}, got {shown(value)}")
            return default if default is not _MISSING else ""
        return str(value)  # a plain str, not the `WholeReference` it may be

    def integer(self, key: str, default: int, minimum: int | None = None,
                maximum: int | None = None) -> int:
        return self.typed(key, default, int, "an integer", _bounds(minimum, maximum))

    def optional_integer(self, key: str, minimum: int = 1) -> int | None:
        return self.typed(key, None, int, "an integer", _bounds(minimum, None))  # type: ignore[arg-type]

    def number(self, key: str, default: float, minimum: float | None = None,
               maximum: float | None = None) -> float:
        return self.typed(key, default, float, "a number", _bounds(minimum, maximum))

    def optional_number(self, key: str, minimum: float, maximum: float) -> float | None:
        return self.typed(key, None, float, "a number", _bounds(minimum, maximum))  # type: ignore[arg-type]

    def boolean(self, key: str, default: bool) -> bool:
        return self.typed(key, default, bool, "true or false")

    def strings(self, key: str, default: tuple[str, ...],
                valid: Callable[[str], object] | None = None, invalid: str = "") -> tuple[str, ...]:
        """A list of non-empty strings; with `valid`, each must pass it (a name that could
        never match anything is refused, `invalid` saying why)."""
        value = self.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem(key, "expected a list of non-empty strings")
            return default
        wrong = [v for v in value if valid is not None and not valid(v)]
        if wrong:
            self.problem(key, f"{shown(wrong[0])} {invalid}")
            return default
        return tuple(str(v) for v in value)

    def mapping(self, key: str) -> Reader:
        section = Reader(self.get(key, {}), self.where(key), self.problems)
        section.shapeless = section.shapeless or self.shapeless
        return section

    def finish(self) -> None:
        unused = sorted(self.seen.difference(self.raw))
        for key in self.raw:
            if key not in self.seen:
                # A misspelt key is otherwise silently its default: name the likely one.
                likely = difflib.get_close_matches(str(key), unused, n=1, cutoff=0.7)
                hint = f" (did you mean {likely[0]}?)" if likely else ""
                self.problems.append(f"{_join(self.path, shown(str(key), quoted=False))}: "
                                     f"unknown key{hint}")


def described(value: Any) -> str:
    """A value of the wrong type as a problem names it: a number with its value (the bound it
    missed is the point), anything else by its type alone: a string there may be a secret."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, str):
        return (f"a string of {len(value)} characters (not shown: it may be a secret)"
                if value else "an empty string")
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def shown(text: str, quoted: bool = True) -> str:
    """Text a problem may quote: credentials masked as `redact` masks them in logs, anything
    shaped like a key replaced by `***`, and cut at `_SHOWN_CHARS`."""
    text = _TOKEN_LIKE.sub("***", redact(text))
    if len(text) > _SHOWN_CHARS:
        text = text[:_SHOWN_CHARS] + "..."
    return repr(text) if quoted else text


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _bounds(minimum: float | None, maximum: float | None) -> Callable[[Any], str | None]:
    def check(value: float) -> str | None:
        if not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if minimum is not None and value < minimum:
            return f"must be at least {minimum}, got {value}"
        if maximum is not None and value > maximum:
            return f"must be at most {maximum}, got {value}"
        return None
    return check


def environment() -> Mapping[str, str]:
    return os.environ


def home_expanded(path: str, home: str) -> str | None:
    """`path` with a leading `~` (alone or before `/`) as `home`; None when it cannot be
    (`~user`, or no home). A path not starting with `~` is returned as it is."""
    if not path.startswith("~"):
        return path
    if not home or not (path == "~" or path.startswith("~/")):
        return None
    base = home.rstrip("/")  # a home of "/" leaves "" before the path's own "/"
    return base + path[1:] if path != "~" else base or "/"


def not_empty(r: Reader, key: str, default: str, meaning: str) -> str:
    """A text key whose empty value (most often an empty `${VAR}`) would silently mean
    something else: refused, with what it would have meant."""
    value = r.string(key, default)
    if not value.strip():
        r.problem(key, f"must not be empty: {meaning}")
        return default
    return value
