"""The one sanitizer for provider-private reasoning state (SPEC §7, PROTOCOL.md §4).

Two kinds, kept apart (`private` knows the fields):
- chain-bound blobs: Responses reasoning items' `encrypted_content`, Responses `compaction`
  items, OpenRouter `reasoning_details` with `reasoning.encrypted` or signed `reasoning.text`,
  `thinking_blocks` / thinking parts with signatures and `redacted_thinking`, Gemini
  `extra_content.google.thought_signature`;
- plain reasoning text: `reasoning_content`, `reasoning`, unsigned details and thinking blocks.

Policies, by where an entry sits: before the latest user message ("past") or after it (the
current tool loop):
| policy              | past            | current tool loop                                      |
| TRANSPARENT         | untouched       | untouched                                              |
| CHEAP               | both kinds gone*†| untouched, except chain-bound items whose chain changed |
| COMPACTED           | both kinds gone†‡| blobs gone, Gemini stand-in signatures, plain kept    |
| COMPACTED_KEEP_LOOP | both kinds gone | untouched (the retry after a missing-thinking error)   |
| PRIVATE_FREE        | both kinds gone | both kinds gone, no stand-ins                          |
† Except plain reasoning in a past turn that made tool calls: DeepSeek's thinking mode wants the
`reasoning_content` of every assistant message between two user messages that made tool calls
back "in all subsequent" requests, or answers 400 (its thinking-mode guide), so such a turn's
plain reasoning stays as the client sent it. SPEC §7.2 drops it on the premise that no provider
needs past turns' reasoning; DeepSeek does.
‡ With Gemini's stand-in where a signature was, as in the current loop: a loop's bytes then do not
change when the next user message makes it past, and the provider's prompt cache keeps hitting
(the stand-in is no blob; Gemini validates only the current turn's signatures).
PRIVATE_FREE also removes LiteLLM's `provider_specific_fields` everywhere: it is the policy of
summarizer requests, history files and the retry after a strict upstream rejected such fields.
* A Responses `compaction` item stands for all the history before it (PROTOCOL.md §4.2: opaque,
passed through untouched); only the proxy's own compaction replaces that history. Under CHEAP it
is treated as in the current loop: kept while its chain holds.
Responses reasoning items go whole whenever they go, and the server ids (`fc_…`, `msg_…`) of
the items that followed them go too; a server-side item whose id is required (`web_search_call`,
`mcp_call`, ...) goes with its reasoning item, with the outputs answering it (`reasoning_items`),
except in a transcript or history file (`upstream=False`). A Responses item's encrypted content
is bound to the exact items before it: under CHEAP it stays only while nothing before it was
changed (`changed_at`). Otherwise visible text, tool calls (ids, names, arguments) and tool
results are never touched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from proxy.conversation import Entries, Entry, Kind, latest_user_index
from proxy.core import private
from proxy.core.kinds import ASSISTANT, CHAT, REASONING, RESPONSES
from proxy.core.private import Rule
from proxy.core.reasoning_items import drop_reasoning


class Policy(StrEnum):
    TRANSPARENT = "transparent"
    CHEAP = "cheap"
    COMPACTED = "compacted"
    COMPACTED_KEEP_LOOP = "compacted_keep_loop"
    PRIVATE_FREE = "private_free"


_NOTHING = Rule(blobs=False, plain=False)
_EVERYTHING = Rule(blobs=True, plain=True)
_NO_PRIVATE_STATE = Rule(blobs=True, plain=True, extras=True)
_BLOBS_WITH_STAND_INS = Rule(blobs=True, plain=False, stand_in=True)
_BLOBS = Rule(blobs=True, plain=False)
_EVERYTHING_WITH_STAND_INS = Rule(blobs=True, plain=True, stand_in=True)
_LOOP_RULE = {
    Policy.TRANSPARENT: _NOTHING,
    Policy.CHEAP: _NOTHING,
    Policy.COMPACTED: _BLOBS_WITH_STAND_INS,
    Policy.COMPACTED_KEEP_LOOP: _NOTHING,
    Policy.PRIVATE_FREE: _NO_PRIVATE_STATE,
}


@dataclass(frozen=True, slots=True)
class Sanitized:
    entries: Entries
    kept: tuple[int, ...]  # for each output entry, its index in the input
    policy: Policy
    changed: int = 0  # input entries changed or dropped
    blobs: Mapping[str, int] = field(default_factory=dict)
    plain: Mapping[str, int] = field(default_factory=dict)
    stand_ins: int = 0
    ids_removed: int = 0
    items_dropped: int = 0


def policy_for(*, compacted: bool, changed: bool, keep_loop: bool = False) -> Policy:
    """The policy of a main-model projection (summarizers and history files: PRIVATE_FREE)."""
    if compacted:
        return Policy.COMPACTED_KEEP_LOOP if keep_loop else Policy.COMPACTED
    return Policy.CHEAP if changed else Policy.TRANSPARENT


def sanitize(entries: Sequence[Entry], policy: Policy, *, changed_at: int | None = None,
             upstream: bool = True) -> Sanitized:
    """Apply `policy`; `changed_at` is the first index whose entry is not the client's (CHEAP).
    Not `upstream`: for a transcript or a history file, which keeps the server items
    (`web_search_call`, ...) a dropped reasoning item would take along (`reasoning_items`)."""
    entries = tuple(entries)
    if policy is Policy.TRANSPARENT or not entries:
        return Sanitized(entries, tuple(range(len(entries))), policy)
    latest = latest_user_index(entries)
    past = 0 if latest is None else latest  # entries[:past] come before the latest user message
    loop_rule = _LOOP_RULE[policy]
    tally = private.Tally()
    private_free = policy is Policy.PRIVATE_FREE
    if private_free:
        past_rule = past_calls_rule = _NO_PRIVATE_STATE
    elif policy is Policy.COMPACTED:  # ‡ in the table above
        past_rule, past_calls_rule = _EVERYTHING_WITH_STAND_INS, _BLOBS_WITH_STAND_INS
    else:
        past_rule, past_calls_rule = _EVERYTHING, _BLOBS
    stripped = _stripped(entries, past, (past_rule, past_calls_rule), loop_rule, tally)
    doomed = _doomed_items(stripped, past, loop_rule, policy, changed_at, tally)
    if not doomed and stripped is entries:
        return Sanitized(entries, tuple(range(len(entries))), policy)
    dropped = drop_reasoning(stripped, tuple(range(len(entries))), lambda i, _: i in doomed,
                             upstream=upstream)
    if policy is Policy.CHEAP and dropped.items_dropped:
        # A server item that went with its reasoning item changed the chain of every blob after
        # it, as a dropped compaction item does: those go too (`changed_at` only moves earlier).
        left = set(dropped.origins)
        first = next(i for i in range(len(entries)) if i not in left and i not in doomed)
        if changed_at is None or first < changed_at:
            return sanitize(entries, policy, changed_at=first, upstream=upstream)
    kept = tuple(i for i in dropped.origins if i is not None and i not in doomed)
    out = tuple(e for e, i in zip(dropped.entries, dropped.origins, strict=True) if i not in doomed)
    changed = len(entries) - len(out) + sum(1 for e, i in zip(out, kept, strict=True) if e is not entries[i])
    if not changed:
        return Sanitized(entries, kept, policy)
    return Sanitized(out, kept, policy, changed, dict(tally.blobs), dict(tally.plain),
                     tally.stand_ins, dropped.ids_removed, dropped.items_dropped)


def _stripped(entries: Entries, past: int, past_rules: tuple[Rule, Rule], loop_rule: Rule,
              tally: private.Tally) -> Entries:
    """The chat messages without the private fields their rule removes; the very same tuple
    when no message had any (`strippable` is memoized, so that is the common, cheap case)."""
    out: list[Entry] | None = None
    calling: list[bool] | None = None
    for i, entry in enumerate(entries):
        if entry.kind is not ASSISTANT or entry.api is not CHAT or not private.strippable(entry):
            continue  # only chat assistant messages carry private fields
        if i < past:
            calling = _turns_with_calls(entries, past) if calling is None else calling
            rule = past_rules[calling[i]]
        else:
            rule = loop_rule
        stripped = private.strip_message(entry, rule, tally)
        if stripped is not entry:
            out = list(entries) if out is None else out
            out[i] = stripped
    return entries if out is None else tuple(out)


def _turns_with_calls(entries: Entries, past: int) -> list[bool]:
    """For each entry before `past`, whether its turn (the span between two user messages)
    has an assistant message that made tool calls."""
    end = min(past, len(entries))
    marks = [False] * past
    start, calls = 0, False
    for i in range(end + 1):
        if i == end or entries[i].kind is Kind.USER:
            if calls:
                marks[start:i] = [True] * (i - start)
            start, calls = i + 1, False
        elif entries[i].calls:
            calls = True
    return marks


def _doomed_items(entries: Entries, past: int, loop_rule: Rule, policy: Policy,
                  changed_at: int | None, tally: private.Tally) -> set[int]:
    """Responses reasoning and compaction items to drop whole."""
    doomed: set[int] = set()
    for i, entry in enumerate(entries):
        bound = entry.api is RESPONSES and private.chain_bound_item(entry)
        if not bound and entry.kind is not REASONING:
            continue
        compaction = bound and entry.kind is not REASONING
        past_rule = loop_rule if compaction and policy is Policy.CHEAP else _EVERYTHING
        rule = past_rule if i < past else loop_rule
        chain_broken = policy is Policy.CHEAP and bound and changed_at is not None and i >= changed_at
        # A reasoning item goes whole: with the blobs even when it holds only plain summaries.
        if rule.blobs or (rule.plain and not bound) or chain_broken:
            doomed.add(i)
            (tally.blobs if bound else tally.plain)[private.item_kind(entry)] += 1
            if compaction and (changed_at is None or i < changed_at):
                changed_at = i  # a dropped compaction item changes the chain of all after it
    return doomed


def counts(sanitized: Sanitized) -> Counter[str]:
    """All removals by kind, blobs and plain text together (for one log field)."""
    total: Counter[str] = Counter()
    for kind, n in sanitized.blobs.items():
        total[f"blob:{kind}"] += n
    for kind, n in sanitized.plain.items():
        total[f"plain:{kind}"] += n
    return total
