"""The checkpoint of a compaction, the projection it builds, and its rebuild (SPEC §1, §5).

projection = leading system/developer entries + summary + restored messages + the raw tail.

`finish` turns a summary into a `CompactionEvent` and its projection, post-checked (restored
files, then the plan, then an older user message quoted whole beyond its budget, are given up
when they alone break the limit); `hopeless` tells before the summary is paid for when that
post-check cannot pass whatever the summary says. `rebuild` is run on every
later request: it finds the boundary by `cutoff_message_id`, else by `cutoff_index`, checks
again that the boundary is a safe cut, and checks the digest of the summarized raw prefix: a
client that edited or branched that part gets None (the stale summary is not applied). So does
a list that ends at or before the boundary (a rewind or a regenerate): the checkpoint only
extends a list that goes on past its summarized prefix, and its projection always ends with the
client's own latest entry, never with the summary standing in for it.

Made entries carry canonical bytes (sorted keys), so the same event on the same raw prefix
gives the same bytes on every request, also after the event went through a store: provider
prompt caches keep hitting.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy import jsonio
from proxy.compaction import postcheck
from proxy.compaction.cutoff import Cutoff, Previous
from proxy.compaction.postcheck import Verdict
from proxy.compaction.restore import Restored
from proxy.conversation import (Api, Entries, Entry, content_text, entry_from,
                                leading_instructions, make_user)
from proxy.core.boundary import is_summary_cut
from proxy.records import CompactionEvent

SUMMARY_HEADER = "Summary of the earlier conversation (context compaction)"

Estimate = Callable[[Entries], int]
Measure = Callable[[Entry], int]


def summary_message(api: Api, summary: str, summarized: int) -> dict[str, Any]:
    text = (f"{SUMMARY_HEADER}: the {summarized} earlier messages of this conversation were "
            f"replaced by the summary below. The messages after it follow verbatim.\n\n"
            f"{summary.strip()}")
    return make_user(api, text).raw


def summary_body(event: CompactionEvent) -> str:
    """The summary text alone, without the header: what a re-compaction carries forward."""
    text = _text_of(event.summary_message)
    head, sep, rest = text.partition("\n\n")
    return rest if sep and head.startswith(SUMMARY_HEADER) else text


def prefix_digest(ids: Sequence[str], lead: int, cut: int) -> str:
    data = "\n".join(ids[lead:cut]).encode()
    return "v1:" + hashlib.blake2b(data, digest_size=16).hexdigest()


def build_event(entries: Sequence[Entry], ids: Sequence[str], cutoff: Cutoff, summary: str,
                restored: Restored, *, strategy: str, tokens_before: int, created_at: float,
                model: str, summarizer_model: str) -> CompactionEvent:
    """The checkpoint; `tokens_after` is 0 until `finish` measured the projection."""
    api = entries[0].api if entries else Api.CHAT
    cut = cutoff.index
    return CompactionEvent(
        cutoff_index=cut,
        cutoff_message_id=ids[cut] if cut < len(ids) else None,
        prefix_digest=prefix_digest(ids, cutoff.lead, cut),
        summary_message=summary_message(api, summary, cut - cutoff.lead),
        restore_messages=restored.messages,
        strategy=strategy, tokens_before=tokens_before, created_at=created_at,
        model=model, summarizer_model=summarizer_model, api=api.value)


def project(entries: Sequence[Entry], lead: int, cut: int, event: CompactionEvent) -> Entries:
    api = entries[0].api if entries else Api(event.api)
    made = [_made(api, event.summary_message), *(_made(api, m) for m in event.restore_messages)]
    return (*entries[:lead], *made, *entries[cut:])


# ---------------------------------------------------------------- finishing a compaction

@dataclass(frozen=True)
class Finished:
    verdict: Verdict
    event: CompactionEvent | None  # set when the verdict is ok
    projection: Entries | None
    restored: Restored  # what was actually restored (files or plan may have been given up)
    tokens_after: int
    summary_tokens: int = 0
    restore_tokens: int = 0


def finish(entries: Sequence[Entry], ids: Sequence[str], cutoff: Cutoff, summary: str,
           restored: Restored, *, estimate: Estimate, measure: Measure, trigger: int,
           limit: int, tokens_before: int, strategy: str, created_at: float, model: str,
           summarizer_model: str) -> Finished:
    """The event and projection for `summary`, post-checked against `trigger`.

    `estimate` measures a whole projection the way the trigger was measured (tools and the
    cheap stages included, as the server sees fit); `measure` sizes single entries; `limit`
    (the model's usable input) only goes into a failure's text.
    """
    levels = _restore_levels(restored)
    for attempt in levels:
        event = build_event(entries, ids, cutoff, summary, attempt, strategy=strategy,
                            tokens_before=tokens_before, created_at=created_at, model=model,
                            summarizer_model=summarizer_model)
        done = _checked(entries, cutoff, event, attempt, estimate, measure, trigger, limit)
        if done.verdict.ok or done.verdict.stage != postcheck.RESTORE or attempt is levels[-1]:
            return done
    raise AssertionError("unreachable: the last restore level always returns")


def hopeless(entries: Sequence[Entry], ids: Sequence[str], cutoff: Cutoff, restored: Restored,
             *, estimate: Estimate, measure: Measure, trigger: int, limit: int,
             tokens_before: int, strategy: str, model: str) -> Verdict | None:
    """The post-check's failure, when it is certain before the summarizer is paid: the
    projection with an empty summary and the least restore `finish` would fall back to is
    already over `trigger` (a summary only adds to it). None when a summary may still fit."""
    least = _restore_levels(restored)[-1]
    event = build_event(entries, ids, cutoff, "", least, strategy=strategy,
                        tokens_before=tokens_before, created_at=0.0, model=model,
                        summarizer_model=model)
    # Measured as if it shrank the context: only its size against the trigger is known yet.
    done = _checked(entries, cutoff, event, least, estimate, measure, trigger, limit,
                    against_before=False)
    return None if done.verdict.ok else done.verdict


def _checked(entries: Sequence[Entry], cutoff: Cutoff, event: CompactionEvent,
             restored: Restored, estimate: Estimate, measure: Measure, trigger: int,
             limit: int, *, against_before: bool = True) -> Finished:
    """`against_before` False: whether it shrank the context is not asked (`hopeless`)."""
    projection = project(entries, cutoff.lead, cutoff.index, event)
    after = estimate(projection)
    made = projection[cutoff.lead:cutoff.lead + 1 + len(restored.messages)]
    summary_tokens, restore_tokens = measure(made[0]), sum(measure(e) for e in made[1:])
    before = event.tokens_before if against_before else after + 1
    verdict = postcheck.check_projection(
        tokens_before=before, tokens_after=after, trigger=trigger, limit=limit,
        summary_tokens=summary_tokens, restore_tokens=restore_tokens,
        tail_sizes=[measure(e) for e in entries[cutoff.index:]], restored=restored.what)
    if not verdict.ok:
        return Finished(verdict, None, None, restored, after, summary_tokens, restore_tokens)
    return Finished(verdict, replace(event, tokens_after=after), projection, restored, after,
                    summary_tokens, restore_tokens)


def _restore_levels(restored: Restored) -> list[Restored]:
    levels = [restored]
    for lesser in (restored.without_files(), restored.users_only(),
                   restored.users_within_budget_only()):
        if lesser is not None and lesser.messages != levels[-1].messages:
            levels.append(lesser)
    return levels


# ---------------------------------------------------------------- rebuild on every request

@dataclass(frozen=True)
class Rebuilt:
    projection: Entries
    cut: int  # index in the raw list of the first entry kept raw
    lead: int
    found_by: str  # "id" or "index"
    event: CompactionEvent

    @property
    def head(self) -> int:
        """How many projection entries come before the raw tail."""
        return self.lead + 1 + len(self.event.restore_messages)

    @property
    def previous(self) -> Previous:
        return Previous(self.cut, summary_body(self.event))


def rebuild(entries: Sequence[Entry], ids: Sequence[str],
            event: CompactionEvent) -> Rebuilt | None:
    """The projection `event` gives this raw list, or None when it no longer applies."""
    found = _find_cut(ids, event)
    if found is None:
        return None
    cut, found_by = found
    lead = leading_instructions(entries)
    if cut <= lead or cut >= len(entries) or not is_summary_cut(entries, cut):
        return None
    if prefix_digest(ids, lead, cut) != event.prefix_digest:
        return None
    return Rebuilt(project(entries, lead, cut, event), cut, lead, found_by, event)


def _find_cut(ids: Sequence[str], event: CompactionEvent) -> tuple[int, str] | None:
    if event.cutoff_message_id is not None:
        try:
            return ids.index(event.cutoff_message_id), "id"
        except ValueError:
            pass
    if 0 <= event.cutoff_index < len(ids):
        return event.cutoff_index, "index"
    return None


# ---------------------------------------------------------------- made entries

def _made(api: Api, raw: dict[str, Any]) -> Entry:
    if _api_of(raw) is not api:
        raw = make_user(api, _text_of(raw)).raw
    # Through jsonio: a restored user message may hold a lone surrogate, which orjson refuses.
    return entry_from(api, raw, jsonio.dumps(raw, sort_keys=True))


def _api_of(raw: dict[str, Any]) -> Api:
    content = raw.get("content")
    responses = raw.get("type") == "message" or (
        isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "input_text"
                                          for p in content))
    return Api.RESPONSES if responses else Api.CHAT


def _text_of(raw: dict[str, Any]) -> str:
    return content_text(entry_from(_api_of(raw), raw))

