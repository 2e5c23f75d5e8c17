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
        self._lock = threading.Lock()
        self._said: set[str] = set()

    def msg(self, message: bytes) -> None:
        try:
            with self._lock:
                self._write(message + b"\n")
                self._flush()
        except BrokenPipeError as exc:
            self._gone(exc)
        except ValueError as exc:  # the file object was closed in the process
            self._say(f"the log output is closed ({exc}): log lines are dropped from now on")
        except OSError as exc:  # a full disk: this line is lost, the next may go through
            self._say(f"a log line could not be written ({exc.strerror or exc}): such lines "
                      f"are dropped")

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


def log_sink_factory(file: BinaryIO | Any) -> Any:
    """A structlog `logger_factory`: one sink for every logger."""
    sink = LogSink(file)
    return lambda *_: sink
