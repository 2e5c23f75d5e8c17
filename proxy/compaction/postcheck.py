"""Whether a compaction's result is usable (SPEC §5 post-check, issue 5 item 7).

Two checks, both pure: `check_reply` on each summarizer answer (empty, cut short at its output
budget, refused, not finished, holding no summary, or unusable), and `check_projection` on the
new projection's estimate, re-measured from content. A failure names its stage so the log and
the error say what broke:
`summary` (empty, truncated, too large alone, or not making the projection smaller: that last
one is flagged `summary_grew`, which the server treats as a failed summary when the thread was
over the trigger), `restore`
(the restored files/plan/messages are what pushes it over; the user's latest message among
them is never cut, so one that cannot fit beside the summary ends here), `message` (one kept
message alone cannot fit), `projection` (summary plus the kept tail still above the trigger).
A failed projection becomes HTTP 400 `context_compaction_insufficient` asking for a new thread;
its text gives the estimate, the trigger it was checked against and the model's limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.compaction.summary_reply import SummaryReply
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
    # What a failed projection was measured against, for the error text.
    tokens: int | None = None  # the projection's estimate after compaction
    trigger: int | None = None
    limit: int | None = None  # the model's usable input
    # The summary alone left the projection no smaller, with nothing else to blame: a failed
    # summary (SPEC §5), as an empty or cut-short one is, rather than a conversation too big.
    summary_grew: bool = False

    def error(self) -> CompactionInsufficient:
        return insufficient(f"{self.stage}: {self.reason}", self.tokens, self.trigger, self.limit)


OK = Verdict(True)


def insufficient(why: str, tokens: int | None, trigger: int | None,
                 limit: int | None) -> CompactionInsufficient:
    """The clear error: what failed, what was measured against what, and a new thread.

    A projection must come under the *trigger* (SPEC §5), which is below the model's limit:
    the text says both, so a refusal of a request that would have fit the model is not
    mistaken for the model's own limit."""
    measured = ""
    if tokens is not None and trigger is not None:
        measured = (f" Estimated size: about {tokens:,} tokens; compaction trigger: "
                    f"{trigger:,} tokens")
        measured += f"; the model's input limit: {limit:,} tokens." if limit else "."
    return CompactionInsufficient(
        f"Context compaction could not make this conversation small enough ({why})."
        f"{measured} Please start a new thread to continue; you can paste a short recap of "
        "where you are.")


def check_reply(reply: SummaryReply, output_budget: int | None = None) -> Verdict:
    """`output_budget`: the summarizer's `compaction.summarizer.max_output_tokens`, named when
    the answer was cut at it. Never a part of a summary: one cut short or filtered loses its
    end, and the prefix it stands for is then dropped for good."""
    said = f" ({reply.said})" if reply.said else ""
    if reply.refused is not None:
        return Verdict(False, SUMMARY, "the summarizer's upstream refused the conversation's "
                                       f"content in its answer{said}")
    if reply.finish_reason == "error":
        return Verdict(False, SUMMARY, f"the summarizer's answer could not be read{said}")
    if reply.finish_reason == "length":
        return Verdict(False, SUMMARY, cut_short(reply.said, output_budget))
    if not reply.finished:
        return Verdict(False, SUMMARY, f"the summarizer's answer is not finished{said}")
    if reply.held:
        return Verdict(False, SUMMARY, f"the summarizer's answer holds no summary, "
                                       f"{reply.held}{said}")
    if not reply.text.strip():
        return Verdict(False, SUMMARY, "the summary is empty")
    return OK


def cut_short(said: str, output_budget: int | None) -> str:
    budget = f" ({output_budget:,} tokens)" if output_budget else ""
    return (f"the summary was cut short at its output limit ({said or 'finish_reason: length'}): "
            f"compaction.summarizer.max_output_tokens{budget} is too small for it (a reasoning "
            "model's reasoning counts against it); raise it, or use a summarizer that writes "
            "shorter summaries")


def check_projection(*, tokens_before: int, tokens_after: int, trigger: int, limit: int,
                     summary_tokens: int, restore_tokens: int, tail_sizes: Sequence[int],
                     restored: str = "the restored files and messages") -> Verdict:
    """`restored` names what the restore messages hold, for the reason."""
    def failed(stage: str, reason: str, summary_grew: bool = False) -> Verdict:
        return Verdict(False, stage, reason, tokens_after, trigger, limit, summary_grew)

    largest = max(tail_sizes, default=0)
    if tokens_after >= tokens_before:
        if restore_tokens and tokens_after - restore_tokens < tokens_before:
            return failed(RESTORE, f"{restored} ({restore_tokens:,} tokens) leave the context "
                                   f"no smaller ({tokens_before:,} -> {tokens_after:,} tokens)")
        # A kept message that alone breaks the trigger is the cause whatever the summary did.
        return failed(SUMMARY, "the summary did not make the context smaller "
                               f"({tokens_before:,} -> {tokens_after:,} tokens)",
                      summary_grew=largest <= trigger)
    if tokens_after <= trigger:
        return OK
    if largest > trigger:
        return failed(MESSAGE, f"one recent message alone has about {largest:,} tokens, more "
                               "than the trigger")
    if summary_tokens > trigger:
        return failed(SUMMARY, f"the summary alone has about {summary_tokens:,} tokens, more "
                               "than the trigger")
    if restore_tokens and tokens_after - restore_tokens <= trigger:
        return failed(RESTORE, f"{restored} ({restore_tokens:,} tokens) push the context over "
                               "the trigger")
    return failed(PROJECTION, "the summary and the recent messages kept verbatim are still "
                              "over the trigger")
