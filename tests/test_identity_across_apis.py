"""A message's id depends on its API and bytes, never on what another request hashed first.

One `Identities` serves every thread of both APIs, and SDKs serialize the same dict to the same
bytes for either endpoint (`{"role": "user", "content": "continue"}`). A chat message and a
Responses item with those bytes have different canonical forms, so different ids (SPEC §3): a
cache keyed by the bytes alone gave the second one the first one's id, and a restarted proxy,
hashing them in another order, other ids: a checkpoint's prefix digest (built from ids) then
no longer matched and its summary was thrown away.
"""

from __future__ import annotations

import pytest

from proxy.conversation import Api, Entry, entries_from
from proxy.identity import Identities

MESSAGES = [{"role": "user", "content": "continue"},
            {"role": "assistant", "content": "Done."},
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]}]
BYTES = [b'{"role": "user", "content": "continue"}',
         b'{"role": "assistant", "content": "Done."}',
         b'{"role": "system", "content": [{"type": "text", "text": "Be terse."}]}']


def _entries(api: Api) -> list[Entry]:
    return list(entries_from(api, [dict(m) for m in MESSAGES], BYTES))


@pytest.mark.parametrize("first, then", [(Api.CHAT, Api.RESPONSES), (Api.RESPONSES, Api.CHAT)])
def test_ids_do_not_depend_on_which_api_sent_the_bytes_first(first: Api, then: Api) -> None:
    shared = Identities()
    shared.ids(_entries(first))
    for entry in _entries(first):
        shared.content_digest(entry)
    alone = Identities()
    assert shared.ids(_entries(then)) == alone.ids(_entries(then))
    assert ([shared.content_digest(e) for e in _entries(then)]
            == [alone.content_digest(e) for e in _entries(then)])


def test_the_two_apis_give_the_same_bytes_different_ids() -> None:
    identities = Identities()
    assert identities.ids(_entries(Api.CHAT)) != identities.ids(_entries(Api.RESPONSES))
