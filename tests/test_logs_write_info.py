"""`write_info`, the request line's way to its log: the very bytes `log.info` writes, for any
facts, in either form; and it does skip structlog's generic steps when it may. The timestamp
every line carries."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from proxy.server import logs
from proxy.server.logs import configure_logging, get_logger, write_info
from proxy.settings import LoggingSettings

_FROZEN_NOW = 1_764_633_600.012345

_NAMES = st.one_of(
    st.sampled_from(["status", "model", "thread", "duration_ms", "level", "timestamp",
                     "exception", "authorization", "Api-Key", "TOKEN", "password", "x-api-key"]),
    st.text(max_size=12).filter(lambda name: name not in ("event", "exc_info")))
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
              st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)


@pytest.fixture(autouse=True)
def _restore_logging():
    yield
    configure_logging(LoggingSettings(format="json", level="info"))


def _written(form: str, write: Any, level: str = "info") -> bytes:
    """What `write(log)` puts on a fresh stream, at a fixed time."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    configure_logging(LoggingSettings(format=form, level=level), stream=stream)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logs.time, "time", lambda: _FROZEN_NOW)
        write(get_logger("proxy"))
    stream.flush()
    return stream.buffer.getvalue()


@pytest.mark.parametrize("form", ["json", "console"])
@given(facts=st.dictionaries(_NAMES, _VALUES, max_size=8))
def test_write_info_writes_the_bytes_log_info_writes(form: str, facts: dict[str, Any]) -> None:
    general = _outcome(form, lambda log: log.info("request", **facts))
    short = _outcome(form, lambda log: write_info(log, "request", dict(facts)))
    assert short == general and general


@given(context=st.dictionaries(_NAMES, _VALUES, max_size=3),
       facts=st.dictionaries(_NAMES, _VALUES, max_size=6))
def test_a_bound_context_comes_first_as_log_info_writes_it(context: dict[str, Any],
                                                          facts: dict[str, Any]) -> None:
    """A logger with a context of its own copies it into the line (the facts after it,
    replacing what they name); without one, the facts are the line."""
    general = _outcome("json", lambda log: log.bind(**context).info("request", **facts))
    short = _outcome("json", lambda log: write_info(log.bind(**context), "request", dict(facts),
                                                   level_checked=True))
    assert short == general and general


def _outcome(form: str, write: Any) -> bytes | str:
    """The line written, or the error that stopped it (the console form refuses some values,
    an `exception` that is not text: the same way on both ways)."""
    try:
        return _written(form, write)
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return f"{type(exc).__name__}: {exc}"


def test_write_info_skips_structlog_generic_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_: Any, **__: Any) -> None:
        raise AssertionError("the general way was taken")

    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    log = get_logger("proxy")
    monkeypatch.setattr(structlog.BoundLoggerBase, "_process_event", refused)
    write_info(log, "request", {"status": 200})
    stream.flush()
    assert b'"status":200,"event":"request","level":"info"' in stream.buffer.getvalue()


def test_write_info_renders_an_exception_as_log_info_does() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        general = _written("json", lambda log: log.info("request", exc_info=True, status=500))
        short = _written("json", lambda log: write_info(log, "request",
                                                        {"exc_info": True, "status": 500}))
    assert short == general and b"RuntimeError: boom" in short


def test_write_info_writes_nothing_above_its_level() -> None:
    assert _written("json", lambda log: write_info(log, "request", {"status": 200}),
                    level="warning") == b""


def test_write_info_leaves_other_loggers_to_their_own_info() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    class Recorder:
        def info(self, event: str, **facts: Any) -> None:
            seen.append((event, facts))

    write_info(Recorder(), "request", {"status": 200, "model": "m"})
    assert seen == [("request", {"status": 200, "model": "m"})]
    assert time.time() != _FROZEN_NOW  # the clock is patched only inside `_written`


@given(now=st.floats(min_value=0, max_value=4e9))
def test_the_timestamp_is_utc_to_the_microsecond_truncated(now: float) -> None:
    second = int(now)
    expected = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
                + f".{int((now - second) * 1_000_000):06d}Z")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logs.time, "time", lambda: now)
        assert logs._UtcStamp()(None, "info", {})["timestamp"] == expected


def test_write_info_lines_reach_structlogs_capture() -> None:
    configure_logging(LoggingSettings(format="json", level="info"), stream=io.StringIO())
    log = get_logger("proxy")
    with structlog.testing.capture_logs() as captured:
        write_info(log, "request", {"status": 200})
    assert captured == [{"status": 200, "event": "request", "log_level": "info"}]
