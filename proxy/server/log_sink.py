"""Where log lines are written: a binary stream, one write and flush a line, under a lock (a
line may come from a thread other than the event loop's), as structlog's `BytesLogger` does,
except that a line that cannot be written is dropped rather than raised.

A log line is never worth a request or a clean stop: when whoever read the proxy's stdout has
gone (`serve | head -1`, a log collector that died), the write raised BrokenPipeError into the
request that logged (every request then printed a logging traceback on stderr) and into the
shutdown, which ended there with a traceback, its requests not drained, the state not closed.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, BinaryIO


class LogSink:
    """A structlog logger (every level is `msg`) writing rendered lines to `file`."""

    def __init__(self, file: BinaryIO | Any) -> None:
        self._file = file
        self._write, self._flush = file.write, file.flush  # bound once: a line each request
        self._fd = _descriptor(file)
        self._lock = threading.Lock()
        self._said: set[str] = set()
        # A line a full disk cut short: the next line first ends it, so the cut one is the
        # only line lost (written after it, the next one would be lost with it).
        self._torn = False

    def msg(self, message: bytes) -> None:
        try:
            with self._lock:
                if self._fd is None:
                    self._write(message + b"\n")
                    self._flush()
                else:
                    self._write_line(message + b"\n")
        except BrokenPipeError as exc:
            self._gone(exc)
        except ValueError as exc:  # the file object was closed in the process
            self._say(f"the log output is closed ({exc}): log lines are dropped from now on")
        except OSError as exc:  # a full disk: this line is lost, the next may go through
            self._say(f"a log line could not be written ({exc.strerror or exc}): such lines "
                      f"are dropped")

    def _write_line(self, line: bytes) -> None:
        """`line` with write(2) itself, not through a buffer: what went out of it is known
        when the disk fills in its middle (a buffer keeps the rest and sends it later, glued
        to whatever comes next)."""
        data = b"\n" + line if self._torn else line
        written = 0
        try:
            while written < len(data):
                written += self._os_write(self._fd, data[written:])
        except OSError:
            # The line is lost. Torn now: a line partly out, or the end of a torn one not out.
            self._torn = written != 1 if self._torn else written > 0
            raise
        self._torn = False

    _os_write = staticmethod(os.write)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg

    def _gone(self, exc: BrokenPipeError) -> None:
        # As Python's documentation advises for a closed pipe: the descriptor goes to
        # /dev/null, so later lines, and the interpreter's own flush at exit, write nowhere
        # instead of raising again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._file.fileno())
            finally:
                os.close(devnull)
        except (OSError, AttributeError, ValueError):  # no descriptor: each line fails alone
            pass
        self._say(f"the log output is closed ({exc.strerror or exc}): log lines are dropped "
                  f"from now on")

    def _say(self, text: str) -> None:
        """Once each: on stderr, the one place left to say it."""
        if text in self._said:
            return
        self._said.add(text)
        try:
            print(f"compaction-proxy: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass


def _descriptor(file: Any) -> int | None:
    """The descriptor lines are written to directly, once the file's own buffer is empty; None
    for a stream that has none (a test's capture), written through as it is."""
    try:
        fd = file.fileno()
        file.flush()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if isinstance(fd, int) else None


def log_sink_factory(file: BinaryIO | Any) -> Any:
    """A structlog `logger_factory`: one sink for every logger."""
    sink = LogSink(file)
    return lambda *_: sink
