"""Stream taps for the pipeline: forward complete events as they arrive, read the answer on the side.

The chat tap can hide the usage-only chunk the proxy asked for on the client's behalf (SPEC §6);
both taps rebuild the response (message or output items) and its usage for the anchor, and
know how to end a broken stream with an error the client's SDK raises.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import orjson

from proxy.errors import error_body
from proxy.sse import SseDecoder, SseEvent
from proxy.streams import ChatStream, ChunkKind, ResponsesStream


_RAW = itemgetter(0)  # an SseEvent's `raw`: the tuple's first field, read in C


class ChatTap:
    def __init__(self, hide_usage: bool) -> None:
        self.hide_usage = hide_usage
        self.decoder = SseDecoder()
        self.stream = ChatStream()
        self.hidden = 0

    def feed(self, chunk: bytes) -> bytes:
        return self._forward(self.decoder.feed(chunk))

    def flush(self) -> bytes:
        return self._forward(self.decoder.flush())

    def _forward(self, events: list[SseEvent]) -> bytes:
        out = []
        for event in events:
            kind = self.stream.feed(event) if event.complete else ChunkKind.OTHER
            if self.hide_usage:
                if kind is ChunkKind.USAGE_ONLY:
                    self.hidden += 1
                    continue
                out.append(_without_null_usage(event.raw))
            else:
                out.append(event.raw)
        return b"".join(out)

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes:
        body = error_body(message, "server_error", None, code)
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def cut_inside_line(self) -> bool:
        return self.decoder.inside_line and not self.complete

    def response(self) -> Any:
        return self.stream.message()

    def usage(self) -> Any:
        return self.stream.usage

    @property
    def complete(self) -> bool:
        return self.stream.done and self.stream.error is None


# With include_usage, every chunk carries `"usage": null` until the last, usually as its last
# key, first on some servers. Inside a JSON string a quote is always escaped, so these bytes
# can only be that key and its null.
_NULL_USAGE = (b',"usage":null', b', "usage": null', b'"usage":null,', b'"usage": null, ')


def _without_null_usage(raw: bytes) -> bytes:
    """A chunk as it would have come had the proxy not asked for usage on the client's behalf."""
    # The usual chunk holds the key once, compact: one replace settles it. `find`, not `in`:
    # see proxy/sse.py. Each pattern holds the key: without it, none matches.
    raw = raw.replace(_NULL_USAGE[0], b"")
    if raw.find(b'"usage"') < 0:
        return raw
    for pattern in _NULL_USAGE[1:]:
        if raw.find(pattern) >= 0:
            raw = raw.replace(pattern, b"")
            if raw.find(b'"usage"') < 0:
                break
    return raw


class ResponsesTap:
    def __init__(self) -> None:
        self.decoder = SseDecoder()
        self.stream = ResponsesStream()

    def feed(self, chunk: bytes) -> bytes:
        return self._forward(self.decoder.feed(chunk))

    def flush(self) -> bytes:
        return self._forward(self.decoder.flush())

    def _forward(self, events: list[SseEvent]) -> bytes:
        for event in events:
            if event.complete:
                self.stream.feed(event)
        return b"".join(map(_RAW, events))

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes:
        body = {"type": "error", "sequence_number": self.stream.sequence + 1,
                **error_body(message, "server_error", None, code)}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"

    def cut_inside_line(self) -> bool:
        return self.decoder.inside_line and not self.complete

    def response(self) -> Any:
        return self.stream.output()

    def usage(self) -> Any:
        return self.stream.usage

    @property
    def complete(self) -> bool:
        return self.stream.status == "completed"
