"""Which attempt follows an upstream rejection (SPEC §7.4, §9), and what each fix changes.

Pure: the pipeline sends, this decides. A fix is the same whether a retry makes it after the
rejection or a remembered lesson makes it at once (`retry_lessons`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from proxy.compaction.overflow import Retry, RetryAction, is_context_overflow, private_state_rejection
from proxy.core.placeholders import with_reasoning_placeholders, with_signature_stand_ins
from proxy.core.sanitize import Policy
from proxy.core.unreasoned import without_unreasoned_items
from proxy.server.prepared import Attempt

# Per rejection: the sanitizer's policy, whether the current loop goes as the client sent it,
# and what the retry changes after the cascade (adds where the current loop lacks it, or takes
# out).
_FIXES = {
    RetryAction.STRIP_BLOBS: (Policy.COMPACTED, False, None),
    RetryAction.STAND_IN: (Policy.COMPACTED, False, None),
    RetryAction.SIGNATURE_STAND_INS: (Policy.COMPACTED, False, with_signature_stand_ins),
    RetryAction.RESTORE_LOOP_BLOBS: (None, True, None),
    RetryAction.DROP_PLAIN_REASONING: (Policy.PRIVATE_FREE, False, None),
    RetryAction.REASONING_PLACEHOLDERS: (None, False, with_reasoning_placeholders),
    RetryAction.DROP_UNREASONED: (Policy.COMPACTED, False, without_unreasoned_items),
}


def fixed(fix: Retry, *, reason: str | None = None, lesson: bool = False) -> Attempt:
    """The attempt that answers `fix`: a retry (`reason` given), or a lesson applied at once."""
    policy, keep_loop, placeholders = _FIXES[fix.action]
    if fix.item is not None and placeholders is not None:  # the fix takes the item named too
        placeholders = partial(placeholders, named=fix.item)
    return Attempt(policy=policy, keep_loop=keep_loop, placeholders=placeholders, reason=reason,
                   fix=fix, lesson=lesson)


def after_rejection(first: Attempt, status: int, body: Any, *, can_compact: bool,
                    compacted: bool) -> tuple[Attempt | None, bool]:
    """The retry after `first` was rejected (None when none can help), and whether the lesson
    `first` was sent with is refused. `can_compact`: an overflow buys a forced compaction;
    `compacted`: `first` was a projection rebuilt from a checkpoint."""
    overflow = is_context_overflow(status, body)
    # A fix sent at once and refused in turn (a 4xx about the request, not its size or rate):
    # the thread's upstream or client changed since, so the thread goes back to the usual path.
    refused = first.lesson and not overflow and status < 500 and status != 429
    if overflow and can_compact:
        # A lesson stays on: without its fix the compacted retry would be refused as before.
        return replace(first, forced=True, reason="context_overflow"), refused
    rejection = private_state_rejection(status, body)
    if rejection is None or rejection.action not in _FIXES:
        return None, refused
    if first.fix is not None and rejection.action is first.fix.action:
        return None, refused  # its retry would send this very request again
    attempt = fixed(rejection, reason=rejection.reason)
    if attempt.keep_loop and not first.lesson and not compacted:
        return None, refused  # the client's own blocks went up untouched: nothing to restore
    return attempt, refused
