"""A TCP relay in front of the tests' real Redis server: a slow or cut-off network, on cue.

A proxy given the relay's URL talks to the real server through it. The relay holds traffic
when a command that holds a marker (a script's digest, say) goes by, so a test can stall a
proxy at an exact point of its work: `hold_reply` delays that command's answer (the server ran
it, the client times out: an outcome the client cannot know), `stall` holds every command of
every connection, the marked one included (a proxy cut off from Redis), until `release`.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class _Cue:
    marker: bytes
    seconds: float
    seen: threading.Event = field(default_factory=threading.Event)


class RedisRelay:
    def __init__(self, port: int) -> None:
        self._target = ("127.0.0.1", port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        self._reply_cue: _Cue | None = None
        self._stall_cue: _Cue | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def hold_reply(self, marker: bytes, seconds: float) -> threading.Event:
        """Delay the answer to the next command holding `marker` (once); set when it went by."""
        self._reply_cue = _Cue(marker, seconds)
        return self._reply_cue.seen

    def stall(self, marker: bytes, seconds: float) -> threading.Event:
        """From the next command holding `marker` on, hold every command for `seconds` or
        until `release` (once); set when it went by."""
        self._stall_cue = _Cue(marker, seconds)
        return self._stall_cue.seen

    def release(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            delay = {"until": 0.0}
            threading.Thread(target=self._requests, args=(client, server, delay),
                             daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, delay),
                             daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket,
                  delay: dict[str, float]) -> None:
        while (data := _received(source)):
            stall = self._stall_cue
            if stall is not None and stall.marker in data:
                self._stall_cue = None
                self._flowing.clear()
                stall.seen.set()
                threading.Timer(stall.seconds, self._flowing.set).start()
            reply = self._reply_cue
            if reply is not None and reply.marker in data:
                self._reply_cue = None
                delay["until"] = time.monotonic() + reply.seconds
                reply.seen.set()
            self._flowing.wait()
            if self._closed or not _sent(sink, data):  # closed: what it held is lost
                break
        _close(source, sink)

    def _replies(self, source: socket.socket, sink: socket.socket,
                 delay: dict[str, float]) -> None:
        while (data := _received(source)):
            time.sleep(max(0.0, delay["until"] - time.monotonic()))
            if not _sent(sink, data):
                break
        _close(source, sink)


def _received(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _sent(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
