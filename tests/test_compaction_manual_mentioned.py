"""`manual.mentioned` against a plain walk: kept answers are read from the entries, and only
the messages not asked yet (a grown list, another command) are tested."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction import manual
from proxy.conversation import Api, Kind, content_text
from tests.test_compaction_support import assistant, conv, system, user

_texts = st.sampled_from(["hi", "/compact", "  /compact keep the API", "/compactly", "x /compact",
                          "/reset", "", "/comp"])
_messages = st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]), _texts),
                     max_size=6)
_MAKE = {"user": user, "assistant": assistant, "system": system}


def _plain(entries: tuple, command: str) -> bool:
    return any(e.kind is Kind.USER and content_text(e).lstrip().startswith(command)
               for e in entries)


@given(_messages, st.integers(0, 6), st.sampled_from(["/compact", "/reset"]))
def test_mentioned_is_the_plain_walk_whatever_was_asked_before(
        messages: list[tuple[str, str]], asked: int, command: str) -> None:
    entries = conv(Api.CHAT, [_MAKE[role](text) for role, text in messages])
    # Asked before of a prefix, under the other command too: some answers kept, some not.
    manual.mentioned(entries[:asked], "/compact")
    manual.mentioned(entries[asked:], "/reset")
    for _ in range(2):  # the first asks what is not kept yet, the second reads it all
        assert manual.mentioned(entries, command) == _plain(entries, command)
    users = [e for e in entries if e.kind is Kind.USER]
    assert all(("manual.mentions", command) in e.memo for e in users)
