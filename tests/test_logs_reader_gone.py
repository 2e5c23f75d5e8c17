"""The proxy's stdout read by something that goes away (`serve | head -1`, a log collector that
died): requests are still served, and SIGTERM still drains and stops cleanly, exit 0.

The shutdown's first log line raised BrokenPipeError out of the serving loop: exit 1 with a
traceback, in-flight requests dropped and the state never closed; meanwhile every request
printed a "--- Logging error ---" traceback on stderr."""

from __future__ import annotations

import io
import os
import signal
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.server.log_sink import LogSink
from proxy.testing.replies import Reply
from tests.process import assert_sound_database, child_env, proxy_command, write_config


def test_a_proxy_whose_log_reader_left_serves_and_stops_cleanly(tmp_path: Path, fake) -> None:
    fake.script(*[Reply.text("fine") for _ in range(3)])
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state")
    child = subprocess.Popen(proxy_command("serve", "--config", str(config)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if b'"listening"' in line:
                port = int(orjson.loads(line)["addresses"][0].rsplit(":", 1)[1])
                break
        child.stdout.close()  # the reader is gone
        for _ in range(3):
            answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                headers={"Authorization": "Bearer sk-x"}, timeout=10,
                                json={"model": "gpt-4o",
                                      "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code == 200
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err.decode()
    assert b"Traceback" not in err, err.decode()
    # One line says where the logs went, not one a request.
    assert err.decode().splitlines() == [
        "compaction-proxy: the log output is closed (Broken pipe): log lines are dropped "
        "from now on"]
    assert_sound_database(tmp_path / "state" / "state.db")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_log_line_the_disk_has_no_room_for_is_dropped_and_said_once(capsys) -> None:
    with open("/dev/full", "wb", buffering=0) as full:
        sink = LogSink(full)
        sink.info(b'{"event":"request"}')
        sink.warning(b'{"event":"request"}')
    assert capsys.readouterr().err == (
        "compaction-proxy: a log line could not be written (No space left on device): such "
        "lines are dropped\n")


def test_a_log_output_closed_in_the_process_drops_lines_and_says_so_once(capsys) -> None:
    # A closed file object raises ValueError, not OSError: each line would otherwise fall
    # back to the standard library's logging and print its traceback.
    output = io.BytesIO()
    sink = LogSink(output)
    sink.info(b'{"event":"first"}')
    output.close()
    sink.info(b'{"event":"request"}')
    sink.error(b'{"event":"request"}')
    assert capsys.readouterr().err == (
        "compaction-proxy: the log output is closed (I/O operation on closed file.): log "
        "lines are dropped from now on\n")


class _FillingDisk:
    """os.write on a disk that fills: each call writes at most what is left of `room`, then
    raises ENOSPC; `room` can be given more, as when space is freed."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __call__(self, fd: int, data: bytes) -> int:
        if self.room <= 0:
            raise OSError(28, "No space left on device")
        n = os.write(fd, data[:self.room])
        self.room -= n
        return n


def test_a_line_a_full_disk_cuts_short_is_ended_before_the_next(capsys, monkeypatch) -> None:
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb") as output:
            sink = LogSink(output)
            disk = _FillingDisk(30)
            monkeypatch.setattr(sink, "_os_write", disk)
            sink.info(b'{"event":"first","n":1}')  # 24 bytes with its newline: room for it
            sink.info(b'{"event":"request","duration_ms":3.2}')  # cut after 6 bytes
            sink.info(b'{"event":"dropped"}')  # no room at all
            disk.room = 1000  # space freed
            sink.info(b'{"event":"after","n":2}')
        with os.fdopen(read, "rb") as written:
            lines = written.read().split(b"\n")
        read = -1
    finally:
        if read != -1:
            os.close(read)
    assert lines == [b'{"event":"first","n":1}', b'{"even', b'{"event":"after","n":2}', b""]
    assert capsys.readouterr().err == (
        "compaction-proxy: a log line could not be written (No space left on device): such "
        "lines are dropped\n")
