"""The log sinks: JSON lines (bytes to a binary buffer, or text), the console form, secrets."""

from __future__ import annotations

import io

import orjson
import pytest

from proxy.server.logs import configure_logging, get_logger
from proxy.settings import LoggingSettings


@pytest.fixture(autouse=True)
def _restore_logging():
    yield
    configure_logging(LoggingSettings(format="json", level="info"))


def _json_lines(stream: io.TextIOBase) -> list[dict]:
    stream.flush()
    text = stream.buffer.getvalue().decode() if hasattr(stream, "buffer") else stream.getvalue()
    return [orjson.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("stream", [io.TextIOWrapper(io.BytesIO(), encoding="utf-8"),
                                    io.StringIO()], ids=["binary buffer", "text only"])
def test_json_lines_reach_either_kind_of_stream(stream) -> None:
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    log = get_logger("proxy")
    log.debug("hidden", n=0)
    log.info("request", status=200, thread="t-é", authorization="Bearer sk-secret",
             api_key="sk-other", blob=object)
    [line] = _json_lines(stream)
    assert line["event"] == "request" and line["level"] == "info" and line["status"] == 200
    assert line["thread"] == "t-é" and line["timestamp"].endswith("Z")
    assert line["authorization"] == "***" and line["api_key"] == "***"
    assert "sk-secret" not in str(line) and line["blob"] == str(object)


def test_an_exception_is_rendered_into_its_line() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        get_logger("proxy").exception("unhandled_error", path="/v1/x")
    [line] = _json_lines(stream)
    assert line["level"] == "error" and "RuntimeError: boom" in line["exception"]


def test_the_console_form_is_one_readable_line() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="console", level="info"), stream=stream)
    get_logger("proxy").info("request", status=200, authorization="Bearer sk-secret")
    [line] = stream.getvalue().splitlines()
    assert "request" in line and "status=200" in line and "authorization=***" in line
    assert "sk-secret" not in line
