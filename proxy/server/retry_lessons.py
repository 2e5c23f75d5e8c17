"""Retry lessons: the fix a thread's upstream needed, sent at once on the thread's later requests.

An upstream that refuses a request's provider-private state gets one retry with that state
stripped or stood in (SPEC §7.4). The refusal comes from a habit of the client or its upstream,
so it comes back on every later turn: a client that never keeps DeepSeek's `reasoning_content`
or Gemini's `thought_signature`, one that echoes reasoning fields to a strict server, a foreign
`encrypted_content` blob replayed with the history, Claude wanting the current loop's thinking
back in a compacted request. Each such turn paid a refused round trip first (twice the latency,
and some providers bill the refused input). Once a retry's fix has passed, the thread's later
requests for that model are prepared with it from the first attempt. A request that goes up
with a lesson and is refused in turn (a 4xx other than a rate limit or an overflow) forgets it,
and the usual retry follows, unless the refusal asks for the very fix the request already had
(the fix that names the items whose reasoning item is missing goes on naming one more, when
the refusal names another: `retry_attempts.carried_on`). A retry refused so in turn is relayed,
and teaches the thread that fix naming both.

Uncompacted requests go up as the client sent them (SPEC §7.3, §11), yet a lesson changes them
before the upstream has refused them. That is defensible because each fix is one this upstream
demonstrably needed for this thread and model, and the client's history still carries what it
refused, so the request would be refused again and its retry would send exactly the request the
lesson sends (a strip drops every chain-bound blob, the upstream's own newer ones too, as the
retry does). A client that later drops what was refused (one that compacts its own history)
keeps getting a strip for at most `USES` requests, then goes without it once (a refusal
teaches it again). Restoring the
loop's blocks changes compacted requests only. A request with a lesson says so on its line
(`retry_lesson`). Kept in memory only: after a restart the first such request learns again,
which costs one retry.
"""

from __future__ import annotations

from proxy.compaction.overflow import Retry, RetryAction
from proxy.lru import LRU
from proxy.records import ThreadKey
from proxy.store.keys import kept_name


# A strip serves this many requests, then the thread's next request goes without it: a client
# that dropped the refused blob (by its own compaction) gets its newer, valid blobs through
# again, at the price of one refused round trip every so many turns when it did not. The other
# fixes only add or leave out what that upstream refuses: nothing is lost by keeping them.
USES = 50
_SPENT = (RetryAction.STRIP_BLOBS, RetryAction.STAND_IN, RetryAction.DROP_UNREASONED)


class RetryLessons:
    def __init__(self, max_threads: int = 4096, uses: int = USES) -> None:
        self._learned: LRU[tuple[ThreadKey, str], tuple[Retry, int | None]] = LRU(max_threads)
        self._uses = uses
        self.some = False  # whether any lesson was ever learned: most threads never need one

    def lesson(self, key: ThreadKey | None, model: str) -> Retry | None:
        """The thread's lesson for `model`, counted as used once."""
        model = kept_name(model)
        found = self._learned.get((key, model)) if key is not None else None
        if found is None:
            return None
        fix, left = found
        if left is None:
            return fix
        if left <= 1:
            self._learned.pop((key, model))
        else:
            self._learned.put((key, model), (fix, left - 1))
        return fix

    def learn(self, key: ThreadKey | None, model: str, fix: Retry) -> None:
        if key is not None:
            self._learned.put((key, kept_name(model)),
                              (fix, self._uses if fix.action in _SPENT else None))
            self.some = True

    def forget(self, key: ThreadKey | None, model: str) -> None:
        if key is not None:
            self._learned.pop((key, kept_name(model)))
