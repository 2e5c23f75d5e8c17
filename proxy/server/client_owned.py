"""Failures of a compaction that belong to the client, not to the summarizer: what the breaker
hears of them, and what the client is told instead of a 503 "retry later".

Three kinds. The summarizer's upstream, called with the request's own credential (it has no
`api_key`), refused that credential (401, 403) or rate-limited it (429): one tenant's key or
quota, which must not open the breaker every tenant shares, and which the client must fix or
wait out; it gets the upstream's status, and for a 429 its wait and its `x-ratelimit-*`
headers (a request that waited for the thread's compaction: what is left of the wait). The
upstream's content policy refused the conversation's content (`CONTENT_REFUSED`), or refused it
inside a 200 (the model's `refusal`, a content filter stopping its answer:
`refused_in_answer`), whichever credential was used: the client's thread, a 400 with the
upstream's code (a model's refusal: `refusal`). And a summary that needs more calls than
`compaction.summarizer.max_calls` allows: refused before any call by its plan, or after the
summarizer's upstream refused the planned steps as too long and a re-plan for the smaller
window it really has would take too many. The same content and configuration are refused the
same way on every retry, and the summarizer is not unhealthy: a 400, not a 503, not counted.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

from proxy import jsonio
from proxy.compaction.summary_reply import CONTENT_REFUSED
from proxy.errors import CompactionInsufficient, SummarizerRefused
from proxy.redaction import without_secrets
from proxy.settings import ModelProfile, UpstreamSettings

CREDENTIAL_REFUSED = (401, 403)
RATE_LIMITED = 429
# An error code or type worth passing on: a short identifier (`invalid_api_key`,
# `insufficient_quota`, Anthropic's `rate_limit_error`), never free text.
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_SECONDS = re.compile(r"\d{1,9}(\.\d{1,6})?")
# OpenAI's rate-limit headers (limit, remaining, and when it resets: a duration like `6m0s`,
# `1.5s` or `20ms`), passed on with its 429: which limit, and when it allows again.
RATE_LIMIT_HEADERS = tuple(f"x-ratelimit-{what}-{unit}"
                           for unit in ("requests", "tokens")
                           for what in ("limit", "remaining", "reset"))
_COUNT_OR_DURATION = re.compile(r"\d{1,12}|(\d{1,9}(\.\d{1,6})?(ms|h|m|s)){1,4}")
_MESSAGE_CHARS = 300

clock = time.monotonic  # looked up at every call: a test moves it


@dataclass(frozen=True)
class Refusal:
    """An HTTP error the summarizer's upstream answered a step with, or a content refusal in
    its HTTP 200 (`refused_in_answer`), as much of it as a client may be shown."""

    status: int
    code: str | None = None
    type: str | None = None
    message: str = ""  # the upstream's own, redacted and clipped; "" when it had none
    retry_after: Mapping[str, str] = field(default_factory=dict)  # its wait, when valid
    limits: Mapping[str, str] = field(default_factory=dict)  # its well-formed x-ratelimit-*
    read_at: float = 0.0  # `clock()` when it was read: what is left of its wait runs from it
    said: str = ""  # a refusal in a 200: where the answer says so (`SummaryReply.said`)


def read_refusal(status: int, data: bytes, headers: Mapping[str, str],
                 secrets: Iterable[str] = ()) -> Refusal:
    """The upstream's error: `error.code`, `error.type` and `error.message` of an OpenAI-shaped
    body (Anthropic's has the same `error` object), its `Retry-After` / `retry-after-ms` and
    its `x-ratelimit-*` headers. `secrets`: the credentials the request carried (`sent_secrets`),
    masked in the message wherever it echoes them."""
    try:
        doc = jsonio.loads(data)
    except ValueError:
        doc = None
    error = doc.get("error") if isinstance(doc, dict) else None
    error = error if isinstance(error, dict) else {}
    message = error.get("message")
    return Refusal(status, _identifier(error.get("code")), _identifier(error.get("type")),
                   _clipped(without_secrets(message, secrets)) if isinstance(message, str) else "",
                   _waits(headers), _limits(headers), clock())


def refused_in_answer(code: str, said: str) -> Refusal:
    """A content refusal in a 200 (`SummaryReply.refused`, its code): the client's, as the
    content policy's 400 is."""
    return Refusal(200, code, said=said, read_at=clock())


def client_refusal(refusal: Refusal | None, upstream: UpstreamSettings) -> Refusal | None:
    """`refusal` when it is the client's: its content refused by a content policy (whichever
    credential), or its own credential refused or rate-limited (the summarizer's upstream was
    called with it: no `api_key`); else None. With the proxy's own key those statuses are the
    summarizer's failure, everyone's."""
    if content_refused(refusal):
        return refusal
    if refusal is None or upstream.api_key:
        return None
    owned = refusal.status in CREDENTIAL_REFUSED or refusal.status == RATE_LIMITED
    return refusal if owned else None


def content_refused(refusal: Refusal | None) -> bool:
    """Whether the upstream's content policy, or the model, refused what the summarizer was
    sent: a 400 with a content policy's code, or a refusal in a 200 (any: only
    `refused_in_answer` makes one)."""
    if refusal is None or refusal.code is None:
        return False
    return refusal.status == 200 or refusal.status == 400 and refusal.code in CONTENT_REFUSED


def content_refusal_reason(refusal: Refusal) -> str:
    # Not the upstream's message: it may quote or list what was flagged.
    if refusal.status == 200:
        return (f"the summarizer's upstream refused the conversation's content in its answer "
                f"(HTTP 200, {refusal.said or refusal.code})")
    return (f"the summarizer's upstream refused the conversation's content by its content "
            f"policy (HTTP 400, {refusal.code})")


def summarizer_verdict(summarized: bool, owned: bool) -> bool | None:
    """What an outcome tells the breaker: it worked, it failed, or nothing (None) when the
    failure is `owned`: the client's own credential refused or rate-limited
    (`client_refusal`), or a failure the compaction's inputs decide (a re-plan over
    `max_calls`). One tenant's revoked key, spent quota or thread must not open the breaker
    every tenant shares."""
    if summarized:
        return True
    return None if owned else False


def refusal_error(refusal: Refusal, waited: bool = False) -> SummarizerRefused:
    """The client's answer: the upstream's status, code and type (a content refusal's type is
    ours: Azure's is null), and for a 429 its message (which limit, how long), its wait and its
    `x-ratelimit-*` headers; `waited`: for a request that waited while the refusal came, what
    is left of the wait. A refused credential's message is not passed on: it may quote the
    credential in a form no redaction knows, and says nothing the status does not."""
    code = f", {refusal.code}" if refusal.code else ""
    if content_refused(refusal):
        return SummarizerRefused(
            f"Context compaction could not run: {content_refusal_reason(refusal)}. The proxy "
            "sent it the earlier part of this conversation to summarize; the same content is "
            "likely refused again: start a new thread, or remove or rephrase what may have "
            "been flagged. Nothing was changed.",
            status=400, type_="invalid_request_error", code=refusal.code)
    if refusal.status == RATE_LIMITED:
        said = f": {refusal.message}" if refusal.message else ""
        return SummarizerRefused(
            f"Context compaction could not run: the summarizer's upstream rate-limited this "
            f"request's credential (HTTP 429{code}{said}). The proxy summarizes with the "
            "credential the request carries; retry once its limit allows. Nothing was changed.",
            status=RATE_LIMITED, type_=refusal.type or "rate_limit_error", code=refusal.code,
            headers={"Retry-After": "1", **refusal.limits,
                     **_in_seconds_too(_left(refusal) if waited else refusal.retry_after)})
    return SummarizerRefused(
        f"Context compaction could not run: the summarizer's upstream refused this request's "
        f"credential (HTTP {refusal.status}{code}). The proxy summarizes with the credential "
        "the request carries; check it. Nothing was changed.",
        status=refusal.status, type_=refusal.type or "invalid_request_error", code=refusal.code)


def over_max_calls_error(reason: str, tokens: int) -> CompactionInsufficient:
    """A plan over `compaction.summarizer.max_calls` where the compaction cannot be done
    without (a request over the model's limit, a `/compact` over the trigger): refused before
    any call, and refused again on every retry of the same content."""
    return CompactionInsufficient(
        f"This conversation (about {tokens:,} tokens) needs context compaction, which cannot "
        f"run: {reason}. A retry is refused the same way: the proxy's operator can raise "
        "compaction.summarizer.max_calls, or start a new thread; you can paste a short recap "
        "of where you are.")


def replan_over_max_calls(needed: int, allowed: int, window_setting: str) -> str:
    """Why a summary failed whose re-plan for a smaller window would take `needed` calls."""
    return (f"the summarizer's upstream refused its planned steps as too long, so its real "
            f"input window is smaller than {window_setting} says (set it to the real one); "
            f"a re-plan for a smaller window: the summary would take {needed} summarizer "
            f"calls, more than compaction.summarizer.max_calls ({allowed}) allows")


def window_setting(profile: ModelProfile | None, window: int) -> str:
    """The setting the summarizer's window of `window` tokens was taken from, named for the
    operator: its model profile's key, or the fallback trigger when it has none."""
    if profile is not None and (profile.max_input_tokens or profile.context_window):
        key = "max_input_tokens" if profile.max_input_tokens else "context_window"
        return f"models.{profile.pattern}.{key} ({window:,} tokens usable)"
    return (f"compaction.fallback_trigger_tokens ({window:,} tokens: the summarizer's model "
            "has no profile with its window)")


def _identifier(value: object) -> str | None:
    return value if isinstance(value, str) and _IDENTIFIER.fullmatch(value) else None


def _clipped(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + "..."


def _waits(headers: Mapping[str, str]) -> dict[str, str]:
    """The upstream's `Retry-After` (seconds or an HTTP date) and `retry-after-ms` (the
    OpenAI SDKs read it first), each passed on only when it reads as what it should be."""
    waits = {}
    after = headers.get("Retry-After", "").strip()
    if _SECONDS.fullmatch(after) or _http_date(after):
        waits["Retry-After"] = after
    millis = headers.get("retry-after-ms", "").strip()
    if _SECONDS.fullmatch(millis):
        waits["retry-after-ms"] = millis
    return waits


def _limits(headers: Mapping[str, str]) -> dict[str, str]:
    found = {name: headers.get(name, "").strip() for name in RATE_LIMIT_HEADERS}
    return {name: value for name, value in found.items() if _COUNT_OR_DURATION.fullmatch(value)}


def _left(refusal: Refusal) -> dict[str, str]:
    """What is left of the refusal's wait now, never under a second. An HTTP date is absolute:
    as it came. (The request the upstream answered is answered at once: its wait is whole.)"""
    elapsed = max(0.0, clock() - refusal.read_at)
    left = dict(refusal.retry_after)
    after = left.get("Retry-After", "")
    if _SECONDS.fullmatch(after):
        left["Retry-After"] = str(max(1, math.ceil(float(after) - elapsed)))
    if "retry-after-ms" in left:
        left["retry-after-ms"] = str(max(1000, round(float(left["retry-after-ms"])
                                                     - elapsed * 1000)))
    return left


def _in_seconds_too(waits: dict[str, str]) -> dict[str, str]:
    """`waits`, with a `Retry-After` of the `retry-after-ms` it has alone (whole seconds, up):
    a client that reads only `Retry-After` would read the default second, and come back early."""
    millis = waits.get("retry-after-ms")
    if millis is None or "Retry-After" in waits:
        return waits
    return {"Retry-After": str(max(1, math.ceil(float(millis) / 1000))), **waits}


def _http_date(text: str) -> bool:
    try:
        return bool(text) and parsedate_to_datetime(text) is not None
    except (TypeError, ValueError, IndexError):
        return False
