"""What the client gets for a compaction that failed, its own or the one it waited for: its
own error when the failure is the client's, a post-check's 400, a 503 that says when to retry,
or `/compact`'s text for a thread kept as it is."""

from __future__ import annotations

from proxy.compaction import manual, postcheck
from proxy.compaction.breaker import Blocked
from proxy.compaction.postcheck import Verdict
from proxy.errors import CompactionInsufficient, CompactionUnavailable, ProxyError
from proxy.projection import Built, Situation
from proxy.server.client_owned import over_max_calls_error, refusal_error
from proxy.server.compaction_errors import CompactionFailed
from proxy.server.turns import POST_CHECK, SharedFailure


def manual_failed(failure: CompactionFailed | SharedFailure, reason: str,
                   blocked: Blocked | None, built: Built, situation: Situation) -> str:
    """`/compact`'s answer to a failed compaction, its own or the one it waited for (`reason`
    says which): the text of a thread kept as it is, or the error to raise."""
    if failure.stage == POST_CHECK:
        return _kept(failure.reason, failure.verdict, built, situation)
    # A refusal its inputs decided (a plan over `max_calls`, say) below the trigger: a thread
    # kept as it is needs no new thread.
    if failure.by_inputs and built.tokens <= situation.thresholds.trigger:
        return manual.unchanged_text(failure.reason, built.tokens)
    owned = owned_error(failure, built)
    if owned is not None:
        raise owned
    raise CompactionUnavailable(f"Compaction failed: {reason}. The conversation is unchanged; "
                                "try again later.", headers=retry_after(blocked))


def _kept(reason: str, verdict: Verdict | None, built: Built, situation: Situation) -> str:
    """`/compact` after a failed post-check: over the trigger, the 400 asking for a new
    thread; below it, a thread a summary cannot shrink (mostly the user's own words,
    restored verbatim) needs no new thread: say so and keep it."""
    if built.tokens > situation.thresholds.trigger:
        raise post_check_error(verdict, reason)
    return manual.unchanged_text(reason, built.tokens)


def owned_error(failure: CompactionFailed | SharedFailure, built: Built) -> ProxyError | None:
    """The answer to a failure that is the client's, for a request that does not fit: its
    credential refused or rate-limited by the summarizer's upstream (its status), its content
    refused by the upstream's content policy (a 400), or a plan or re-plan over `max_calls`
    (a 400: a retry is refused the same way). None: the summarizer's."""
    if failure.refusal is not None:
        return refusal_error(failure.refusal, waited=isinstance(failure, SharedFailure))
    if failure.by_inputs and failure.stage != POST_CHECK:
        return over_max_calls_error(failure.reason, built.tokens)
    return None


def retry_after(blocked: Blocked | None) -> dict[str, str]:
    # A failure that left the breaker closed may be retried at once; 1 s keeps it from spinning.
    return {"Retry-After": str(blocked.retry_after if blocked is not None else 1)}


def post_check_error(verdict: Verdict | None, reason: str) -> CompactionInsufficient:
    # Every failed post-check carries its verdict; the bare reason is for an unforeseen one.
    return verdict.error() if verdict is not None else postcheck.insufficient(reason, None,
                                                                               None, None)


def waited_for(failed: SharedFailure) -> str:
    return f"the compaction this request waited for failed just now ({failed.reason})"
