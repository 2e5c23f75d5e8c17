"""What comes back verbatim after a summary (SPEC §5, issue 5 item 4).

From the summarized part only:
- files: the latest text of up to `max_files` recently read files (calls named in `file_tools`,
  globs, not an editor's edit sub-command: `tool_names`; the path from the call's arguments; the latest read of a path wins; a path read again in the
  kept tail is skipped, the tail already has the newer text). A file over `per_file_tokens` is
  cut with a marker; one that no longer fits `total_tokens` is skipped. Images, files, base64
  dumps and other binary-looking content are never restored.
  A call of a `shell_tools` tool is a read of a file when its command line prints one file's
  text (`cat F`, `sed -n 'A,Bp' F`, `head -n N F`: `shell_reads`) and its result states exit
  code 0 uncut (`shell_calls`); a line range is restored as a read_file range is, under its
  arguments. A directory shown by a file tool (an editor's `view` of a directory) is no file.
  Multi-file reads (`read_many_files`) are not split into their files.
- plan: the latest call named in `plan_tools` (its arguments are the plan; a `view` command
  only shows it), unless the tail has a newer one.
- the user's own messages, verbatim, chosen newest first within `user_messages_tokens` (a
  message that does not fit is skipped, older short ones may still fit); the latest one always,
  whole, however long (SPEC §4, §5: the latest user message is never cut), and when it is the
  user's current request its images, audio clips and files go along after the quote (older
  messages' are left to a note). When it is the user's current request (no user message in the
  kept tail) and cannot fit the window beside the summary, the post-check fails the compaction
  with the clear error. When a newer user message is kept raw, it is an earlier instruction: the
  post-check's last resort holds it to the budget like the others (`users_within_budget`), and
  the summary covers it.

Each becomes a user message that says plainly what it is; the server counts their tokens in
the post-check, which may drop the files (then the plan) when they alone break the window.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.compaction.cutoff import Cutoff
from proxy.compaction.file_reads import ReadTools, directory_view
from proxy.compaction.transcript import middle_cut
from proxy.conversation import (Api, Entry, Kind, ToolCall, content_text, has_non_text_parts,
                                make_user, make_user_parts, non_text_parts)
from proxy.core.legacy_calls import answered, step_calls
from proxy.core.shell_calls import outcome
from proxy.core.tool_names import sets_plan
from proxy.settings import RestoreSettings

Count = Callable[[str], int]
Measure = Callable[[Entry], int]

HEADER = "Restored after context compaction"
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{400,}")
_ODD_CHARS = re.compile("[\x01-\x08\x0b\x0e-\x1f\ufffd]")
_CANDIDATES = 4  # reads looked at per file restored: older reads are not worth the scan
_MAX_TOKEN_CHARS = 16
_JOIN_TOKENS = 2
_PROBE_CHARS = 6  # characters per budgeted token looked at first in a long file
_ATTACHED_NOTE = "[an image, audio clip or file was attached; it is not restored]"
_ATTACHED_BELOW = "[the image(s), audio clip(s) or file(s) attached to it follow this quote]"


@dataclass(frozen=True)
class Restored:
    files: tuple[dict[str, Any], ...] = ()
    plan: tuple[dict[str, Any], ...] = ()
    users: tuple[dict[str, Any], ...] = ()
    file_paths: tuple[str, ...] = ()
    user_messages: int = 0  # how many user messages the `users` message quotes
    notes: tuple[str, ...] = ()  # what was skipped and why, for the log
    # (text, tokens) of each file message: an exact count or a bound a few tokens over it.
    file_counts: tuple[tuple[str, int], ...] = ()
    # The user-message quote held to its budget, when that differs from `users`: the latest
    # summarized message was forced in whole though a newer user message is kept raw.
    users_within_budget: tuple[dict[str, Any], ...] | None = None
    user_messages_within_budget: int = 0
    latest_whole: bool = True  # `users` quotes the latest summarized user message whole

    @property
    def messages(self) -> tuple[dict[str, Any], ...]:
        return self.files + self.plan + self.users

    @property
    def what(self) -> str:
        """What the messages hold, as a failed post-check names it."""
        if self.files or self.plan:
            return "the restored files, plan and user messages"
        if not self.latest_whole:
            return "the user's own messages restored verbatim"
        return "the user's own messages restored verbatim, the latest one whole"

    def without_files(self) -> Restored:
        return replace(self, files=(), file_paths=(), file_counts=())

    def users_only(self) -> Restored:
        return replace(self.without_files(), plan=())

    def users_within_budget_only(self) -> Restored | None:
        """The last resort of the post-check: an older user message that alone breaks the
        compaction is left to the summary (the user's current request is never)."""
        if self.users_within_budget is None:
            return None
        return replace(self.users_only(), users=self.users_within_budget,
                       user_messages=self.user_messages_within_budget,
                       users_within_budget=None, latest_whole=False)


@dataclass(frozen=True)
class _Read:
    path: str
    call: ToolCall
    text: str
    index: int
    result: Entry
    names: tuple[str, ...]  # how a later call may name the file


def collect(entries: Sequence[Entry], cutoff: Cutoff, settings: RestoreSettings, count: Count,
            measure: Measure | None = None) -> Restored:
    """`measure` (an entry's tokens, cached) lets a file that needs no cut skip its count:
    its message is its result's text under a header, so the result's size bounds it."""
    api = entries[0].api if entries else Api.CHAT
    span = cutoff.summarized
    files, paths, notes = _files(entries, span, cutoff.index, settings, count, measure)
    plan = _plan(entries, span, cutoff.index, settings, count)
    users, budgeted = _users(entries, span, cutoff.index, settings.user_messages_tokens, count)
    return Restored(tuple(_message(api, t) for t, _ in files),
                    tuple(_message(api, t) for t in plan),
                    tuple(_message(api, t, users.attached) for t in users.texts), tuple(paths),
                    users.quoted,
                    tuple(notes), tuple(files),
                    None if budgeted is None else tuple(_message(api, t) for t in budgeted.texts),
                    0 if budgeted is None else budgeted.quoted)


# ---------------------------------------------------------------- files

def _files(entries: Sequence[Entry], span: range, tail_start: int, settings: RestoreSettings,
           count: Count, measure: Measure | None
           ) -> tuple[list[tuple[str, int]], list[str], list[str]]:
    if settings.max_files <= 0:
        return [], [], []
    tools = ReadTools(frozenset(settings.file_tools), frozenset(settings.shell_tools))
    chosen: list[tuple[str, str, int]] = []
    notes: list[str] = []
    total = 0
    candidates = 0
    for read in _latest_reads(entries, span, tail_start, tools):
        candidates += 1
        if len(chosen) >= settings.max_files or candidates > _CANDIDATES * settings.max_files:
            break
        # A text cut to its budget keeps at least this many tokens: when even that cannot fit,
        # the file is skipped without paying for a count.
        floor = min(settings.per_file_tokens, len(read.text) // _MAX_TOKEN_CHARS)
        if total + floor > settings.total_tokens:
            notes.append(f"{read.path}: over the total restore budget")
            continue
        stale = _touched_after(entries, read.index, read.names, tools)
        text, tokens = _file_message(read, stale, settings.per_file_tokens, count, measure)
        if total + tokens > settings.total_tokens:
            notes.append(f"{read.path}: over the total restore budget")
            continue
        total += tokens
        chosen.append((read.path, text, tokens))
    chosen.reverse()  # oldest first, so the most recent file sits nearest the tail
    return [(t, n) for _, t, n in chosen], [p for p, _, _ in chosen], notes


def _latest_reads(entries: Sequence[Entry], span: range, tail_start: int,
                  tools: ReadTools) -> Iterator[_Read]:
    """Text reads in `span`, newest first, one per path, skipping paths re-read in the tail."""
    results = _results_by_call(entries, span)
    in_tail = {found[0] for e in entries[tail_start:] for c in step_calls(e)
               if (found := tools.path_of(c)) is not None}
    seen: set[str] = set(in_tail)
    for i in reversed(span):
        for call in step_calls(entries[i]):
            found = tools.path_of(call)
            result = results.get((i, call.id))
            if found is None or found[0] in seen or result is None:
                continue
            path, wrapped, names = found
            seen.add(path)
            text = _read_text(result, call, path, wrapped)
            if text and text.strip() and not looks_binary(text):
                yield _Read(path, call, text, i, result, names)


def _read_text(result: Entry, call: ToolCall, path: str, wrapped: bool) -> str | None:
    """The file's text in a read's result: a shell command's own output when its result says
    it exited 0 uncut, else a file tool's text result unless it lists a directory."""
    if wrapped:
        found = outcome(result, call)
        return found[1] if found is not None and found[0] == 0 else None
    if has_non_text_parts(result):
        return None
    output = content_text(result)
    return None if directory_view(path, output) else output


def _results_by_call(entries: Sequence[Entry], span: range) -> dict[tuple[int, str], Entry]:
    """Each call's first result in `span`, keyed by (the call's entry, its id). Keyed by the
    id alone, a later turn that uses the id again (`call_0` in every turn) would lend its
    result to the earlier call."""
    found: dict[tuple[int, str], Entry] = {}
    latest: dict[str, int] = {}  # the entry of the latest call of each id
    for i in span:
        for call in step_calls(entries[i]):
            latest[call.id] = i
        answer = answered(entries, i)
        if answer in latest:
            found.setdefault((latest[answer], answer), entries[i])
    return found


def looks_binary(text: str) -> bool:
    """NUL bytes, many control or replacement characters, or mostly one base64 run."""
    if "\x00" in text:
        return True
    sample = text[:65536]
    odd = len(_ODD_CHARS.findall(sample))
    if odd > max(8, len(sample) // 100):
        return True
    runs = sum(len(m) for m in _BASE64_RUN.findall(sample))
    return runs > len(sample) // 2


def _touched_after(entries: Sequence[Entry], index: int, names: tuple[str, ...],
                   tools: ReadTools) -> bool:
    """Whether a later non-read call names the file (an edit may have changed it)."""
    return any(any(n in c.arguments for n in names) and not tools.only_looks(c)
               for e in entries[index + 1:] for c in step_calls(e))


def _file_message(read: _Read, stale: bool, per_file_tokens: int, count: Count,
                  measure: Measure | None = None) -> tuple[str, int]:
    """The message and its tokens (exact, or a bound at most a few tokens over)."""
    note = (" A later tool call names this file, so this text may be out of date."
            if stale else "")
    head = (f"{HEADER}: the latest content of the file {read.path} as the assistant read it "
            f"earlier with {read.call.name} (arguments {_short(read.call.arguments)}).{note}")
    if measure is not None:
        known = measure(read.result)  # the whole tool message: at least its text's tokens
        if known <= per_file_tokens:
            # Tokens never span the tokenizer's split at the blank line between the parts.
            return f"{head}\n\n{read.text}", count(head) + known + _JOIN_TOKENS
    # No token is longer than _MAX_TOKEN_CHARS characters in practice: text beyond that many
    # per budgeted token will be cut anyway, so it is never counted.
    capped = text = read.text[:per_file_tokens * _MAX_TOKEN_CHARS]
    probe = per_file_tokens * _PROBE_CHARS
    if len(capped) > probe:
        # A long file is nearly always over budget already within its first few characters
        # per token: cutting there spares counting the rest.
        probe_tokens = count(capped[:probe])
        if probe_tokens > per_file_tokens:
            text = _cut(capped, read.text, _share(probe, per_file_tokens, probe_tokens))
    if text is capped and len(capped) < len(read.text):
        text = _cut(capped, read.text, len(capped))  # sparse text past the cap
    message = f"{head}\n\n{text}"
    tokens = count(message)
    head_tokens = count(head)
    if tokens - head_tokens > per_file_tokens:
        keep = _share(len(text), per_file_tokens, tokens - head_tokens)
        message = f"{head}\n\n{_cut(text, read.text, keep)}"
        tokens = count(message)
    return message, tokens


def _share(chars: int, budget: int, tokens: int) -> int:
    """How many of `chars` characters (`tokens` tokens) fit `budget`, with room to spare."""
    return max(0, int(chars * budget / max(1, tokens) * 0.95) - 120)


def _cut(text: str, whole: str, keep: int) -> str:
    """`text`, a prefix of `whole`, cut at the last line end within `keep` characters, with
    a marker saying how much of `whole` was left out."""
    cut_at = text.rfind("\n", 0, keep) if keep else 0
    kept = text[:cut_at if cut_at > 0 else keep]
    omitted = whole[len(kept):].count("\n") + 1
    return (f"{kept}\n[... truncated: about {omitted} more lines were not restored; "
            "read the file again if you need them]")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


# ---------------------------------------------------------------- plan

def _plan(entries: Sequence[Entry], span: range, tail_start: int, settings: RestoreSettings,
          count: Count) -> list[str]:
    tools = frozenset(settings.plan_tools)
    if any(sets_plan(c, tools) for e in entries[tail_start:] for c in step_calls(e)):
        return []
    for i in reversed(span):
        for call in reversed(step_calls(entries[i])):
            if sets_plan(call, tools):
                plan = call.arguments
                tokens = count(plan)
                if tokens > settings.per_file_tokens:
                    plan = middle_cut(plan, settings.per_file_tokens / tokens)
                return [f"{HEADER}: the latest plan / TODO list, as last set with {call.name}. "
                        f"It reflects the state at that time; the summary above says what "
                        f"happened since.\n\n{plan}"]
    return []


# ---------------------------------------------------------------- the user's own messages

@dataclass(frozen=True)
class _Quote:
    texts: list[str]  # the one quoting message, or none
    quoted: int  # how many user messages it quotes
    # The non-text parts of the user's current request, carried after the quote's text.
    attached: tuple[Any, ...] = ()


def _users(entries: Sequence[Entry], span: range, tail_start: int, budget: int,
           count: Count) -> tuple[_Quote, _Quote | None]:
    """The quote of the summarized user messages, and the same held to the budget when that
    differs (None: it does not)."""
    # An agent that runs a long tool loop after one request has that request summarized: the
    # latest quoted message is then the task still under way, and must not read as history.
    current = not any(e.kind is Kind.USER for e in entries[tail_start:])
    users = [i for i in reversed(span) if entries[i].kind is Kind.USER]
    if not users:
        return _Quote([], 0), None
    # The current request keeps its images, audio and files (SPEC §4: never cut); the older
    # messages' are left to a note (restored as text, within a budget of text tokens).
    attached = non_text_parts(entries[users[0]]) if current else ()
    texts = [(i, _user_text(entries[i], n == 0 and bool(attached))) for n, i in enumerate(users)]
    sizes = [count(text) for _, text in texts]
    whole = _within(texts, sizes, budget, latest_whole=True)  # the latest: always, whole
    quote = _Quote([_users_message(whole, len(texts), current)], len(whole), attached)
    if current:
        return quote, None
    # A newer user message is kept raw: this one is an earlier instruction, which the
    # post-check may hold to the budget when it alone breaks the compaction.
    budgeted = _within(texts, sizes, budget, latest_whole=False)
    if budgeted == whole:
        return quote, None
    return quote, _Quote([_users_message(budgeted, len(texts), False)] if budgeted else [],
                         len(budgeted))


def _within(texts: list[tuple[int, str]], sizes: list[int], budget: int, *,
            latest_whole: bool) -> list[tuple[int, str]]:
    """Newest first within the budget (a message that does not fit is skipped, older short
    ones may still fit), in the order they were written."""
    chosen: list[tuple[int, str]] = []
    used = 0
    for n, (text, tokens) in enumerate(zip(texts, sizes)):
        if (n == 0 and latest_whole) or used + tokens <= budget:
            chosen.append(text)
            used += tokens
    chosen.sort()
    return chosen


def _user_text(entry: Entry, attached: bool = False) -> str:
    """`attached`: its non-text parts go along after the quote (`non_text_parts`)."""
    text = content_text(entry)
    if not has_non_text_parts(entry):
        return text
    note = _ATTACHED_BELOW if attached else _ATTACHED_NOTE
    # The note goes after the text, which is never stripped: verbatim includes its whitespace.
    return f"{text}\n{note}" if text else note


def _users_message(chosen: list[tuple[int, str]], total: int, current: bool) -> str:
    """`current`: the last of `chosen` is the user's latest message, the request the
    conversation is still working on (no message of theirs came after it)."""
    left_out = total - len(chosen)
    extra = (f" {left_out} other message(s) of theirs are covered only by the summary."
             if left_out else "")
    last = len(chosen) - 1
    quoted = "\n\n".join(
        f"--- user message {n + 1} of {len(chosen)}"
        f"{' (their current request)' if current and n == last else ''} ---\n{text}"
        for n, (_, text) in enumerate(chosen))
    if current:
        role = ("The last of them is the user's current request: nothing of theirs came after "
                "it, and the conversation is still working on it. Any others are not new "
                "requests; they keep the user's instructions and corrections word for word.")
    else:
        role = ("They are not new requests; they keep the user's instructions and corrections "
                "word for word.")
    return (f"{HEADER}: the user's own earlier messages from the summarized part of the "
            f"conversation, quoted verbatim in the order they were written.{extra} {role}"
            f"\n\n{quoted}")


def _message(api: Api, text: str, attached: tuple[Any, ...] = ()) -> dict[str, Any]:
    if not attached:
        return make_user(api, text).raw
    part = {"type": "text" if api is Api.CHAT else "input_text", "text": text}
    return make_user_parts(api, [part, *attached]).raw
