"""How the trigger is shared out in the projection a compaction builds (SPEC §5).

After a compaction the projection holds the leading instructions and tools, the summary, the
restored messages and the kept tail, and the post-check wants all of it under the trigger.
The restore budgets are held to shares of the trigger (configured budgets are absolute, a
small model's window must still hold the rest), and the kept tail to what is left once the
others have their room (`tail_cap`), whatever the keep ratio asks: a keep ratio close to the
trigger ratio would otherwise keep a tail that leaves the summary no room, and the post-check
would refuse a summary already paid for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from proxy.settings import RestoreSettings

_RESTORE_SHARE = 0.15
_USERS_SHARE = 0.08
# Share of the trigger left free beside the budgets: the made messages' framing, the summary's
# header, and the cheap stages' estimate differing a little from the per-entry sizes.
_TAIL_SLACK = 0.05


def restore_budgets(config: RestoreSettings, trigger: int) -> RestoreSettings:
    total = min(config.total_tokens, int(trigger * _RESTORE_SHARE))
    return replace(config, total_tokens=total, per_file_tokens=min(config.per_file_tokens, total),
                   user_messages_tokens=min(config.user_messages_tokens,
                                            int(trigger * _USERS_SHARE)))


@dataclass(frozen=True)
class TailCap:
    """The most tokens a kept tail starting at an index may hold (`at`).

    The user's latest message is in the projection whatever the cut: kept raw, or, once
    summarized with no user message kept after it, restored whole (SPEC §5), maybe beyond the
    users' budget that `tokens` leaves room for. A tail that starts after it leaves room for
    that excess too."""

    tokens: int
    latest_user: int = -1  # the index of the user's latest message; -1: none
    excess: int = 0  # its tokens beyond the users' budget

    def at(self, start: int) -> int:
        return max(0, self.tokens - self.excess) if start > self.latest_user else self.tokens


def tail_cap(trigger: int, fixed: int, margin: float, summary_tokens: int,
             budgets: RestoreSettings, latest_user: int = -1,
             latest_user_tokens: int = 0) -> TailCap:
    """The cap for a projection that must come under `trigger`: `fixed` is the leading
    instructions and tools as the estimate measures them (its safety margin included), `margin`
    that safety margin (the estimate applies it to all the rest too), `summary_tokens` the
    longest summary the summarizer may write, `budgets` the restore budgets (`restore_budgets`),
    and `latest_user` the index of the user's latest message, of `latest_user_tokens`."""
    reserved = summary_tokens + budgets.total_tokens + budgets.user_messages_tokens
    room = math.floor(trigger * (1.0 - _TAIL_SLACK)) - fixed
    tokens = max(0, math.floor(room / (1.0 + margin)) - reserved)
    excess = max(0, latest_user_tokens - budgets.user_messages_tokens) if latest_user >= 0 else 0
    return TailCap(tokens, latest_user, excess)
