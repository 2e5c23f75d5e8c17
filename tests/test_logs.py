"""The log sinks: JSON lines (bytes to a binary buffer, or text), the console form, secrets;
the standard library's records in the same form, redacted; odd strings that must not break a line."""

from __future__ import annotations

import io
import logging
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from proxy.server.logs import configure_logging, get_logger
from proxy.server.metrics import Metrics
from proxy.redaction import redact
from proxy.server.request_line import RequestLine
from proxy.settings import LoggingSettings
from tests.process import ProxyProcess, write_config


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


def test_secrets_are_masked_on_every_line_however_often_their_neighbours_came() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    log = get_logger("proxy")
    for _ in range(3):  # the same harmless fields, line after line
        log.info("request", status=200, thread="t", model="m")
    log.info("request", status=200, thread="t", model="m", **{"Api-Key": "sk-1"})
    log.info("request", status=200, thread="t", model="m", TOKEN="sk-2", password="sk-3")
    lines = _json_lines(stream)
    assert [line["status"] for line in lines] == [200] * 5
    assert lines[3]["Api-Key"] == "***"
    assert (lines[4]["TOKEN"], lines[4]["password"]) == ("***", "***")
    assert "sk-" not in str(lines)


def test_an_exception_is_rendered_into_its_line() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    try:
        raise RuntimeError("boom, sent Authorization: Bearer LEAK")
    except RuntimeError:
        get_logger("proxy").exception("unhandled_error", path="/v1/x")
    [line] = _json_lines(stream)
    assert line["level"] == "error" and "RuntimeError: boom" in line["exception"]
    assert "LEAK" not in line["exception"]  # a traceback is free text: redacted


def test_the_console_form_is_one_readable_line() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="console", level="info"), stream=stream)
    get_logger("proxy").info("request", status=200, authorization="Bearer sk-secret")
    [line] = stream.getvalue().splitlines()
    assert "request" in line and "status=200" in line and "authorization=***" in line
    assert "sk-secret" not in line


@pytest.mark.parametrize("text, kept", [
    ("Invalid header value char:\n\n    b'Authorization: Bearer sk-LEAK-ctrl\\x01'\n      ^",
     "Invalid header value char:"),
    ("b'POST / HTTP/1.1\\r\\nx-api-key: LEAK-hex\\r\\nHost: x\\r\\n'", "\\r\\nHost: x"),
    ("Proxy-Authorization: Basic TEVBSy1iYXNpYw==\nnext", "\nnext"),
    ("Got more than 65536 bytes when reading: b'LEAK-long...'.", "65536 bytes"),
    ("token Bearer LEAK-bearer and a key sk-proj-LEAK_key-1 in text", "and a key"),
    ("400, message='Bad', url='https://h/v1/models?key=LEAK-q&alt=LEAK-a#f'",
     "url='https://h/v1/models?key=***&alt=***#f'"),
], ids=["header line in a bytes repr", "api-key among lines", "proxy basic", "too long",
        "bearer and sk", "url query"])
def test_redact_removes_credentials_from_free_text(text: str, kept: str) -> None:
    redacted = redact(text)
    assert "LEAK" not in redacted and kept in redacted and "***" in redacted


def test_a_stdlib_record_is_a_redacted_line_of_the_proxys_own() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    try:
        raise BadHttpMessage("Invalid header value char:\n\n  b'api-key: LEAK-quoted\\x00'")
    except BadHttpMessage as error:
        logging.getLogger("aiohttp.server").error("Error handling request from %s, %s",
                                                  "127.0.0.1", "Bearer LEAK-arg", exc_info=error)
    logging.getLogger("aiohttp.server").debug("below the level")
    [line] = _json_lines(stream)
    assert line["logger"] == "aiohttp.server" and line["level"] == "error"
    assert line["event"] == "Error handling request from 127.0.0.1, Bearer ***"
    assert "BadHttpMessage" in line["exception"] and "LEAK" not in stream.getvalue()


@pytest.mark.parametrize("form", ["json", "console"])
def test_a_lone_surrogate_is_written_escaped_never_raised(form: str) -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # a strict encoder, like stdout's
    configure_logging(LoggingSettings(format=form, level="info"), stream=stream)
    get_logger("proxy").info("request", model="gpt-4o\ud800", tags=["\udfff"], big=2**70)
    if form == "json":
        [line] = _json_lines(stream)
        assert line["model"] == "gpt-4o\\ud800" and line["tags"] == ["\\udfff"]
        assert line["big"] == str(2**70)
    else:
        stream.flush()
        assert "model=gpt-4o\\ud800" in stream.buffer.getvalue().decode()


def test_the_request_line_leaves_out_facts_set_to_none_and_keeps_falsy_ones() -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    with RequestLine(get_logger("proxy"), None, "chat", path="/v1/chat/completions") as line:
        line.set(status=200, model="m", stream=False, bytes_out=0, note="", thread=None)
        line.set(compaction_failed="summarize")
        line.set(compaction_failed=None)  # cleared: not on the line
    [written] = _json_lines(stream)
    assert (written["status"], written["stream"], written["bytes_out"], written["note"]) == (
        200, False, 0, "")
    assert "thread" not in written and "compaction_failed" not in written
    assert written["path"] == "/v1/chat/completions" and written["duration_ms"] >= 0


def test_a_failing_log_sink_never_breaks_the_request_line() -> None:
    class BrokenLog:
        def info(self, event: str, **fields: object) -> None:
            raise OSError("the log's pipe is closed")

    stream = io.StringIO()
    configure_logging(LoggingSettings(format="json", level="info"), stream=stream)
    metrics = Metrics()
    with RequestLine(BrokenLog(), metrics, "chat") as line:
        line.set(status=200)
    assert metrics.registry.get_sample_value("proxy_requests_total",
                                             {"kind": "chat", "status": "200"}) == 1
    [report] = _json_lines(stream)  # through the standard library's logging, which never raises
    assert report["event"] == "request line not written (status 200)"
    assert "OSError: the log's pipe is closed" in report["exception"]


def _send_raw(port: int, header: bytes) -> None:
    """A request with one malformed header line, its answer read to the end."""
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}'
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + header +
               b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request)
            while sock.recv(65536):
                pass
        except ConnectionError:  # refused before it was all read: answered and closed
            pass


def test_http_parser_errors_are_logged_as_json_without_the_key(tmp_path: Path, fake) -> None:
    proxy = ProxyProcess(write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state"))
    try:
        _send_raw(proxy.port, b"Authorization: Bearer sk-LEAKTEST-ctrl\x01")
        _send_raw(proxy.port, b"api-key: LEAKTEST" + b"7" * 70_000)
        _send_raw(proxy.port, b"x-api-key: LEAKTEST-nul\x00x")
        # The proxy's runner answers these itself (proxy/server/runner.py) and logs the kind
        # of problem only; whatever aiohttp's own logger says goes through the redaction too.
        errors = proxy.wait_for("bad_http_request", count=3)
        proxy.signal(signal.SIGTERM)
        proxy.wait_for("stopped")
        assert proxy.wait() == 0
    finally:
        proxy.kill()
    assert sorted(e["status"] for e in errors) == [400, 400, 431]
    assert all(e["level"] == "warning" for e in errors)
    output = b"".join(proxy.raw)  # stdout and stderr, every line JSON
    assert b"LEAKTEST" not in output and b"7" * 16 not in output
    assert all(orjson.loads(line) for line in output.splitlines())


_CHAT_ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Hi."}}]}
_CHAT_STREAM = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                b'"choices":[{"index":0,"delta":{"content":"Hi."}}]}\n\ndata: [DONE]\n\n')


async def _any_model(request: web.Request) -> web.StreamResponse:
    """An upstream that answers whatever the model is (the fake, like orjson, refuses a lone
    surrogate): a chat completion, its stream, or an embedding."""
    body = await request.read()
    if request.path.endswith("/embeddings"):
        return web.json_response({"object": "list", "data": [], "model": "m"})
    if b'"stream":true' not in body:
        return web.json_response(_CHAT_ANSWER)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_CHAT_STREAM)
    return response


@pytest.fixture
def any_model_upstream(loop_thread) -> Iterator[str]:
    app = web.Application()
    app.router.add_post("/v1/{tail:.*}", _any_model)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> int:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner.addresses[0][1]

    yield f"http://127.0.0.1:{loop_thread.run(start())}/v1"
    loop_thread.run(runner.cleanup())


@pytest.mark.parametrize("path, stream", [("chat/completions", False), ("chat/completions", True),
                                          ("embeddings", False)],
                         ids=["chat", "chat stream", "passthrough"])
def test_a_lone_surrogate_in_the_model_is_logged_escaped(make_proxy, any_model_upstream,
                                                         path: str, stream: bool) -> None:
    proxy = make_proxy(any_model_upstream)
    body = ('{"model":"gpt-4o\\ud800","stream":%s,"input":"x",'
            '"messages":[{"role":"user","content":"hi"}]}' % str(stream).lower())
    answer = httpx.post(f"{proxy.base_url}/{path}", content=body, timeout=20,
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 200
    if stream:
        assert answer.text == _CHAT_STREAM.decode()  # whole, its final chunk included
    [line] = proxy.requests()
    assert line["status"] == 200 and line["model"] == "gpt-4o\\ud800"
    assert not proxy.logs.events("unhandled_error")
