"""Structured logging: JSON lines by default, a console renderer on request.

Every line is a structlog event; request lines and compaction events are plain key/value facts.
Credentials never reach a log line: the processors below drop any field whose name says it holds
one, as a second guard behind the code that never passes them. Records of the standard
library's loggers (aiohttp's parser errors, asyncio's warnings) are written as lines of the same
kind, their text redacted: aiohttp quotes the raw header line it refused, key and all.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import MutableMapping
from typing import Any, BinaryIO, TextIO

import orjson
import structlog

from proxy.redaction import redact
from proxy.server.log_sink import log_sink_factory
from proxy.settings import LoggingSettings

_SECRET_FIELDS = frozenset({"authorization", "api_key", "api-key", "x-api-key", "password", "token"})
_ORJSON_INTS = range(-(2**63), 2**64)


def _drop_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Every request writes a line of ~30 fields whose names are the code's own: names once
    # found harmless are checked in one C-level set operation, the rest one by one.
    if _HARMLESS.issuperset(event):
        return event
    secret = [k for k in event if k.lower() in _SECRET_FIELDS]
    for name in secret:
        event[name] = "***"
    if len(_HARMLESS) < _MAX_HARMLESS:
        _HARMLESS.update(k for k in event if k not in secret)
    return event


_HARMLESS: set[str] = set()
_MAX_HARMLESS = 4096


def _redacted_traceback(exc_info: Any) -> str:
    """The traceback structlog's `format_exc_info` writes, redacted: it is free text, and a
    parser error quotes what it refused. (Formatted here, not in a processor of its own, so
    lines without an exception pay nothing.)"""
    return redact("".join(traceback.format_exception(*exc_info)).rstrip("\n"))


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
        # %d truncates as int() does; it formats faster than an f-string's `:06d`.
        event["timestamp"] = "%s.%06dZ" % (self._prefix, (now - second) * 1_000_000)
        return event


def _json_line(_: Any, __: str, event: MutableMapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(event, default=str)
    except TypeError:  # orjson's JSONEncodeError; only a line that fails pays for the repair
        return orjson.dumps(_encodable(event), default=_valid_str)


def _encodable(value: Any) -> Any:
    """`value` with what orjson refuses made text: client strings with a lone surrogate (a
    `model` of "gpt-4o\\ud800") and integers past 64 bits."""
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, dict):
        return {_valid_text(str(k)): _encodable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encodable(v) for v in value]
    if isinstance(value, int) and value not in _ORJSON_INTS:
        return str(value)
    return value


def _valid_text(text: str) -> str:
    """`text` as valid UTF-8: a lone surrogate becomes the six characters of its escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _valid_str(value: object) -> str:
    return _valid_text(str(value))


class _ConsoleLine:
    """The console form, as UTF-8 bytes for the same sink as JSON lines. Encoded here, with
    lone surrogates escaped, because a text stream's strict encoder would raise on one."""

    def __init__(self) -> None:
        self._render = structlog.dev.ConsoleRenderer(colors=False)

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> bytes:
        return self._render(logger, name, event).encode("utf-8", "backslashreplace")


class _TextSink:
    """A text stream seen as a binary one, for a logger given a stream without `buffer`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, data: bytes) -> int:
        return self._stream.write(data.decode())

    def flush(self) -> None:
        self._stream.flush()


class _StdlibRecords(logging.Handler):
    """Hands the standard library's records to the structlog pipeline: one format and one sink
    for every line, and the record's message and exception text redacted on the way."""

    def __init__(self, log: Any, level: int) -> None:
        super().__init__(level)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        # structlog knows the five standard levels only.
        level = min(max(record.levelno // 10 * 10, logging.DEBUG), logging.CRITICAL)
        try:
            self._log.log(level, redact(record.getMessage()), logger=record.name,
                          exc_info=record.exc_info)
        except Exception:  # noqa: BLE001 - a handler reports its failures, never raises them
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        # The standard report of a failed emit prints the record's message and arguments as
        # they came, credentials and all.
        record.msg, record.args = "(a record that could not be written)", None
        super().handleError(record)


_INFO = logging.INFO


class _Processors(list[Any]):
    """The processor chain `configure_logging` installs. Its type tells `write_info` that a
    logger runs exactly these steps, so the request line may run them itself."""

    def __init__(self, stamp: _UtcStamp, render: Any) -> None:
        super().__init__([structlog.processors.add_log_level, stamp, _drop_secrets,
                          structlog.processors.ExceptionRenderer(_redacted_traceback), render])
        self.stamp = stamp
        self.render = render
        # structlog.testing.capture_logs() swaps the steps in this very list: then the general
        # way runs whatever it holds.
        self.installed = list(self)


def write_info(log: Any, event: str, facts: dict[str, Any], *, level_checked: bool = False) -> None:
    """`log.info(event, **facts)`: the same bytes to the same sink. `facts` is the caller's to
    give away: it may become the line itself. `level_checked`: the caller knows `log` is
    enabled for info.

    A logger bound to the chain `configure_logging` built takes a short way. Every request
    writes a line, and structlog's generic steps were a third of its cost (some 40k of 130k
    instructions): the keywords copied twice, a loop over five processors of which two do
    nothing here (`add_log_level` sets the level named below; `ExceptionRenderer` acts on
    `exc_info` only), and checks on the result.
    Anything else (another logger, steps swapped by `capture_logs`, a level above info,
    `exc_info`) goes the general way."""
    processors = getattr(log, "_processors", None)
    if (type(processors) is _Processors and processors == processors.installed
            and "event" not in facts and (level_checked or log.is_enabled_for(_INFO))):
        # structlog's steps, as _process_event runs them: the context, then the facts. A line
        # has some 30 facts: without a context, they are the line as they are, not copied.
        context = log._context  # noqa: SLF001
        if context:
            line = context.copy()
            line.update(facts)
        else:
            line = facts
        if "exc_info" not in line:
            line["event"] = event
            line["level"] = "info"
            sink = log._logger  # noqa: SLF001 - what structlog hands each processor
            line = _drop_secrets(sink, "info", processors.stamp(sink, "info", line))
            sink.info(processors.render(sink, "info", line))
            return
    log.info(event, **facts)


def configure_logging(settings: LoggingSettings, stream: TextIO | None = None) -> None:
    """JSON lines by default: rendered to bytes by orjson and written to the stream's binary
    buffer, one write and flush per line (every request writes one; the text layer and
    `print` cost about as much as the rendering). `console` renders text for humans."""
    global _levelled
    level = getattr(logging, settings.level.upper())
    stream = stream or sys.stdout
    renderer = _ConsoleLine() if settings.format == "console" else _json_line
    processors = _Processors(_UtcStamp(), renderer)
    _levelled = type("LevelledLogger", (structlog.BoundLoggerBase,), {})
    _take_level(_levelled, level)
    structlog.configure(processors=processors, wrapper_class=_levelled,
                        logger_factory=log_sink_factory(_binary(stream)),
                        cache_logger_on_first_use=False)
    _route_stdlib_records(level)


def set_level(name: str) -> None:
    """Every logger the last `configure_logging` made (and makes) writes from level `name` on,
    at once (a config reload's `logging.level`): their one class takes the methods structlog
    makes for that level, so a call costs what it did, a line below the level nothing."""
    level = getattr(logging, name.upper())
    _take_level(_levelled, level)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _StdlibRecords):
            handler.setLevel(level)


def _take_level(cls: type, level: int) -> None:
    for name, method in vars(structlog.make_filtering_bound_logger(level)).items():
        if not name.startswith("__"):
            setattr(cls, name, method)


# The class of the loggers the last `configure_logging` made: `set_level` changes its methods.
# A class per configuration: loggers an earlier one made (another app in a test) keep theirs.
_levelled: type = type("LevelledLogger", (structlog.BoundLoggerBase,), {})


def _binary(stream: TextIO) -> BinaryIO | _TextSink:
    binary = getattr(stream, "buffer", None)
    return binary if binary is not None else _TextSink(stream)


def _route_stdlib_records(level: int) -> None:
    """One handler on the root logger, replacing the one an earlier configuration installed.
    The root's own level stays the application's (the standard library's default: WARNING),
    so what used to reach stderr now comes out here, and libraries' debug records stay off
    unless asked for."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StdlibRecords)]:
        root.removeHandler(handler)
    root.addHandler(_StdlibRecords(get_logger("stdlib"), level))


def get_logger(name: str = "proxy") -> Any:
    """A logger bound to the configuration in force now. Not the lazy proxy: that one binds
    anew on every call, which costs more than the request line it writes; an application
    takes its logger when it is built, after `configure_logging`."""
    return structlog.get_logger(name).bind()
