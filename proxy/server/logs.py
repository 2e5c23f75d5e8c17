"""Structured logging: JSON lines by default, a console renderer on request.

Every line is a structlog event; request lines and compaction events are plain key/value facts.
Credentials never reach a log line: the processors below drop any field whose name says it holds
one, as a second guard behind the code that never passes them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

from proxy.settings import LoggingSettings

_SECRET_FIELDS = frozenset({"authorization", "api_key", "api-key", "x-api-key", "password", "token"})


def _drop_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for name in [k for k in event if k.lower() in _SECRET_FIELDS]:
        event[name] = "***"
    return event


class _UtcStamp:
    """`timestamp` as ISO 8601 UTC with microseconds, the form structlog's `TimeStamper(fmt="iso",
    utc=True)` writes, at a tenth of its cost: the date and time of day are formatted once a
    second. Every request writes a line, so the stamp is on the hot path."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, _: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second, self._prefix = second, time.strftime("%Y-%m-%dT%H:%M:%S",
                                                               time.gmtime(second))
        event["timestamp"] = f"{self._prefix}.{int((now - second) * 1_000_000):06d}Z"
        return event


def _json_line(_: Any, __: str, event: MutableMapping[str, Any]) -> bytes:
    return orjson.dumps(event, default=str)


class _TextSink:
    """A text stream seen as a binary one, for a JSON logger given a stream without `buffer`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, data: bytes) -> int:
        return self._stream.write(data.decode())

    def flush(self) -> None:
        self._stream.flush()


def configure_logging(settings: LoggingSettings, stream: TextIO | None = None) -> None:
    """JSON lines by default: rendered to bytes by orjson and written to the stream's binary
    buffer, one write and flush per line (every request writes one; the text layer and
    `print` cost about as much as the rendering). `console` renders text for humans."""
    level = getattr(logging, settings.level.upper())
    stream = stream or sys.stdout
    processors: list[Any] = [structlog.processors.add_log_level, _UtcStamp(), _drop_secrets,
                             structlog.processors.format_exc_info]
    factory: Any
    if settings.format == "console":
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
        factory = structlog.PrintLoggerFactory(file=stream)
    else:
        processors.append(_json_line)
        binary = getattr(stream, "buffer", None)
        factory = structlog.BytesLoggerFactory(file=binary if binary is not None
                                               else _TextSink(stream))
    structlog.configure(processors=processors,
                        wrapper_class=structlog.make_filtering_bound_logger(level),
                        logger_factory=factory, cache_logger_on_first_use=False)


def get_logger(name: str = "proxy") -> Any:
    """A logger bound to the configuration in force now. Not the lazy proxy: that one binds
    anew on every call, which costs more than the request line it writes; an application
    takes its logger when it is built, after `configure_logging`."""
    return structlog.get_logger(name).bind()
