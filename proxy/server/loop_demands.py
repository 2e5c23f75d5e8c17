"""Threads whose upstream wants the current tool loop's thinking blocks in compacted requests.

A compacted projection drops chain-bound blobs, the current loop's too (SPEC §7.2); Claude with
thinking enabled then answers "Expected `thinking` or `redacted_thinking`" (PROTOCOL.md §4.5),
and the one retry sends the loop as the client did (SPEC §7.4). A Cline-shaped session through
OpenRouter did that on 66 of its 80 requests: every compacted request inside a tool loop paid
a rejected round trip first. Once a thread's upstream has asked, its later compacted requests
for that model keep their loop's blocks at once. Kept in memory only: after a restart the
first such request asks again, which costs one retry.
"""

from __future__ import annotations

from proxy.lru import LRU
from proxy.records import ThreadKey


class LoopDemands:
    def __init__(self, max_threads: int = 4096) -> None:
        self._asked: LRU[tuple[ThreadKey, str], bool] = LRU(max_threads)
        self.some = False  # whether any thread ever asked: most upstreams never do

    def asked(self, key: ThreadKey | None, model: str) -> bool:
        return key is not None and bool(self._asked.get((key, model)))

    def remember(self, key: ThreadKey | None, model: str, asked: bool) -> None:
        if key is not None and (asked or self._asked.get((key, model))):
            self._asked.put((key, model), asked)
            self.some = self.some or asked
