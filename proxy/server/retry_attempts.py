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
    if fix.items and placeholders is not None:  # the fix takes the items named too
        placeholders = partial(placeholders, named=fix.items)
    return Attempt(policy=policy, keep_loop=keep_loop, placeholders=placeholders, reason=reason,
                   fix=fix, lesson=lesson)


# How many items a fix names at most: past that a thread goes back to the usual path, one
# retry a request, each naming one item (a list that left out this many is beyond repair).
MAX_NAMED = 32


def carried_on(fix: Retry, rejection: Retry) -> Retry | None:
    """`fix` naming as well the items `rejection` (a refusal that asks for the same fix) names
    that it did not; None when it names none new. A refusal names one item (the first it
    finds), so a client that left out several reasoning items (or their references, which
    the strip keeps) is told of them one refusal at a time."""
    new = tuple(item for item in rejection.items if item not in fix.items)
    if not new or len(fix.items) + len(new) > MAX_NAMED:
        return None
    return replace(rejection, items=fix.items + new)


def further_fix(fix: Retry, status: int, body: Any) -> Retry | None:
    """For a retry with `fix` refused in turn (`status`, `body`) by a refusal that asks for that
    very fix, for an item it does not name: the fix naming that one too, which the thread's
    next request goes up with. Else each of its requests would be refused twice over, the
    same two refusals, and no retry would ever pass."""
    rejection = private_state_rejection(status, body)
    if rejection is None or rejection.action is not fix.action:
        return None
    return carried_on(fix, rejection)


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
        rejection = carried_on(first.fix, rejection)
        if rejection is None:
            return None, refused  # its retry would send this very request again
    attempt = fixed(rejection, reason=rejection.reason)
    if attempt.keep_loop and not first.lesson and not compacted:
        return None, refused  # the client's own blocks went up untouched: nothing to restore
    return attempt, refused
