"""Whether a compaction's result is usable (SPEC §5 post-check, issue 5 item 7).

Two checks, both pure: `check_reply` on each summarizer answer (empty, cut short by
`finish_reason: length`, or unusable), and `check_projection` on the new projection's estimate,
re-measured from content. A failure names its stage so the log and the error say what broke:
`summary` (empty, truncated, too large alone, or not making the projection smaller), `restore`
(the restored files/plan/messages are what pushes it over), `message` (one kept message alone
cannot fit), `projection` (summary plus the kept tail still above the trigger).
A failed projection becomes HTTP 400 `context_compaction_insufficient` asking for a new thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.compaction.summarizer import SummaryReply
from proxy.errors import CompactionInsufficient

SUMMARY = "summary"
RESTORE = "restore"
MESSAGE = "message"
PROJECTION = "projection"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    stage: str | None = None
    reason: str = ""

    def error(self) -> CompactionInsufficient:
        return CompactionInsufficient(
            "This conversation is too long for the model even after context compaction "
            f"({self.stage}: {self.reason}). Please start a new thread to continue; "
            "you can paste a short recap of where you are.")


OK = Verdict(True)


def check_reply(reply: SummaryReply) -> Verdict:
    if reply.finish_reason == "error":
        return Verdict(False, SUMMARY, "the summarizer's answer could not be read")
    if reply.finish_reason == "length":
        return Verdict(False, SUMMARY, "the summary was cut short (finish_reason: length)")
    if not reply.text.strip():
        return Verdict(False, SUMMARY, "the summary is empty")
    return OK


def check_projection(*, tokens_before: int, tokens_after: int, trigger: int,
                     summary_tokens: int, restore_tokens: int,
                     tail_sizes: Sequence[int]) -> Verdict:
    if tokens_after >= tokens_before:
        if restore_tokens and tokens_after - restore_tokens < tokens_before:
            return Verdict(False, RESTORE, f"the restored files and messages ({restore_tokens} "
                                           f"tokens) leave the context no smaller "
                                           f"({tokens_before} -> {tokens_after} tokens)")
        return Verdict(False, SUMMARY, f"it did not make the context smaller "
                                       f"({tokens_before} -> {tokens_after} tokens)")
    if tokens_after <= trigger:
        return OK
    largest = max(tail_sizes, default=0)
    if largest > trigger:
        return Verdict(False, MESSAGE, f"one recent message alone has about {largest} tokens, "
                                       f"over the limit of {trigger}")
    if summary_tokens > trigger:
        return Verdict(False, SUMMARY, f"the summary alone has about {summary_tokens} tokens, "
                                       f"over the limit of {trigger}")
    if restore_tokens and tokens_after - restore_tokens <= trigger:
        return Verdict(False, RESTORE, f"the restored files and messages ({restore_tokens} "
                                       f"tokens) push the context to {tokens_after} tokens, "
                                       f"over the limit of {trigger}")
    return Verdict(False, PROJECTION, f"the summary and the kept recent messages still come "
                                      f"to about {tokens_after} tokens, over the limit of "
                                      f"{trigger}")
