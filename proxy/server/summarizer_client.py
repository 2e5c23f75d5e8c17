"""Calling the summarizer: drive a `SummaryPlan` step by step over the shared upstream client.

Each step is a plain, non-streaming request to the summarizer's upstream (chat completions or
Responses, as `upstreams.<name>.api` says), authorized with the upstream's own key or else the
client's credential, and nothing else of the client's: no thread headers, no cache keys.

`run_replanning` re-plans a summary in halves of the summarizer's window when it refuses a step
as too long, within a bound on the calls of one compaction (`summarizer.max_calls`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from proxy import jsonio
from proxy.compaction import postcheck
from proxy.compaction.overflow import is_context_overflow
from proxy.compaction.summarizer import COMPLETION_KEY, SummaryPlan
from proxy.compaction.summary_reply import read_reply
from proxy.conversation import Api
from proxy.errors import ProxyError
from proxy.server.client_owned import (Refusal, content_refusal_reason, content_refused,
                                       read_refusal, refused_in_answer)
from proxy.server.headers import upstream_request_headers
from proxy.server.inflate import AnswerTooLarge, answer_encoding, inflated
from proxy.redaction import sent_secrets, without_secrets
from proxy.server.upstream import UpstreamClient, answer_failed, read_body
from proxy.settings import UpstreamSettings

_PATHS = {Api.CHAT: "/chat/completions", Api.RESPONSES: "/responses"}
# (upstream, model) pairs that refused `max_tokens`: a few, named in the config or by clients.
_NEWER_KEY: set[tuple[str, str]] = set()
_OVERFLOW_REPLANS = 4  # halvings of the summarizer's window when it refuses a step as too long


@dataclass(frozen=True)
class SummaryOutcome:
    text: str | None  # the summary; None when it failed
    error: str = ""
    calls: int = 0
    duration_ms: float = 0.0
    output_tokens: int = 0
    overflow: bool = False  # a step was refused as longer than the summarizer's window
    refusal: Refusal | None = None  # the HTTP error a step was answered with
    # The calls a re-plan for a smaller window would have taken, past `max_calls`; 0 when no
    # re-plan was refused so.
    replan_calls: int = 0


async def run_summary(plan: SummaryPlan, upstream: UpstreamSettings, client: UpstreamClient,
                      credentials: Mapping[str, str], timeout_s: float) -> SummaryOutcome:
    started = time.perf_counter()
    secrets = sent_secrets(credentials, upstream.api_key)  # what an error body may echo
    if plan.output_key == "max_tokens" and (upstream.name, plan.model) in _NEWER_KEY:
        plan = replace(plan, output_key=COMPLETION_KEY)
    carried = plan.previous_summary
    output_tokens = 0
    for step in range(plan.steps):
        try:
            for _ in range(2):  # a second time only with the newer output key
                body = jsonio.dumps(plan.request(step, carried))
                status, data, headers = await asyncio.wait_for(
                    _post(client, upstream, plan.api, credentials, body), timeout_s)
                if not (status == 400 and plan.output_key == "max_tokens"
                        and _wants_newer_key(data)):
                    break
                # A reasoning model the name did not tell (`summarizer._output_key`), for this
                # upstream's model from now on.
                if len(_NEWER_KEY) < 1024:
                    _NEWER_KEY.add((upstream.name, plan.model))
                plan = replace(plan, output_key=COMPLETION_KEY)
        except asyncio.TimeoutError:
            return _failed(f"the summarizer did not answer within {timeout_s:g}s", step, started)
        except ProxyError as error:
            return _failed(error.message, step, started)
        if status != 200:
            refusal = read_refusal(status, data, headers, secrets)
            said = (content_refusal_reason(refusal) if content_refused(refusal)
                    else f"the summarizer answered HTTP {status}: {_excerpt(data, secrets)}")
            return replace(_failed(said, step, started), refusal=refusal,
                           overflow=is_context_overflow(status, data))
        reply = read_reply(plan.api, data)
        if reply.refused is not None:  # the client's, as the content policy's 400 is
            refusal = refused_in_answer(reply.refused, reply.said)
            return replace(_failed(content_refusal_reason(refusal), step, started),
                           refusal=refusal)
        verdict = postcheck.check_reply(reply, plan.max_output_tokens)
        if not verdict.ok:
            return _failed(verdict.reason, step, started)
        carried = reply.text
        output_tokens += reply.output_tokens or 0
    return SummaryOutcome(carried, calls=plan.steps, output_tokens=output_tokens,
                          duration_ms=_ms(started))


async def run_replanning(plan: SummaryPlan, window: int, plan_for: Callable[[int], SummaryPlan],
                         max_calls: int, replanned: Callable[[int], None],
                         upstream: UpstreamSettings, client: UpstreamClient,
                         credentials: Mapping[str, str], timeout_s: float) -> SummaryOutcome:
    """`run_summary` of `plan` (made for `window`); when a step is refused as too long, again
    with the plan `plan_for` makes for half the window (`replanned` is told), unless that would
    take the calls past `max_calls`: then it fails as it is (`replan_calls` says how many it
    would have taken), and the error says so."""
    outcome = await run_summary(plan, upstream, client, credentials, timeout_s)
    calls = outcome.calls
    for _ in range(_OVERFLOW_REPLANS):
        if outcome.text is not None or not outcome.overflow:
            break
        # Its window is smaller than its profile (or the fallback trigger) says.
        window //= 2
        plan = plan_for(window)
        if calls + plan.steps > max_calls:
            return replace(outcome, calls=calls, replan_calls=calls + plan.steps,
                           error=f"{outcome.error}; a re-plan for a smaller window: "
                           f"{too_many_calls(calls + plan.steps, max_calls)}")
        replanned(window)
        outcome = await run_summary(plan, upstream, client, credentials, timeout_s)
        calls += outcome.calls
    return replace(outcome, calls=calls)


def too_many_calls(needed: int, allowed: int) -> str:
    return (f"the summary would take {needed} summarizer calls, more than "
            f"compaction.summarizer.max_calls ({allowed}) allows")


async def _post(client: UpstreamClient, upstream: UpstreamSettings, api: Api,
                credentials: Mapping[str, str],
                body: bytes) -> tuple[int, bytes, Mapping[str, str]]:
    headers = upstream_request_headers(credentials, api_key=upstream.api_key,
                                       identity_encoding=True)
    headers["Content-Type"] = "application/json"
    response = await client.send(upstream, "POST", _PATHS[api], headers, body)
    async with response:
        data = await read_body(response, upstream)
        try:
            # Compressed although asked for identity: read inflated (else as it came, and
            # failing).
            plain = inflated(data, answer_encoding(response.headers)) or data
        except AnswerTooLarge as exc:
            raise answer_failed(upstream, exc) from None
        return response.status, plain, response.headers


def _wants_newer_key(data: bytes) -> bool:
    """OpenAI's refusal of `max_tokens` for a reasoning model: `unsupported_parameter`, param
    `max_tokens` ("... Use 'max_completion_tokens' instead.")."""
    try:
        error = jsonio.loads(data).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("param") == "max_tokens" and (
        error.get("code") == "unsupported_parameter"
        or COMPLETION_KEY in str(error.get("message")))


def _failed(error: str, step: int, started: float) -> SummaryOutcome:
    return SummaryOutcome(None, error, step + 1, _ms(started))


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _excerpt(data: bytes, secrets: list[str]) -> str:
    # Logged (`compaction_failed`) and quoted in the client's 503: an upstream may echo the
    # credential it refused, the proxy's own `api_key` or the client's, in any form. Masked
    # before the cut, so that no start of one is left at the end.
    text = without_secrets(data[:4096].decode("utf-8", "replace"), secrets)
    return text[:300] + ("..." if len(text) > 300 or len(data) > 4096 else "")
