"""What `digest_of` hashes: the canonical form's JSON with sorted keys, as `jsonio.dumps` writes
it, including the forms orjson refuses (a lone surrogate, an integer past 64 bits), which the
standard library writes. Stored ids and anchors hold these digests: they must never move."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from proxy import jsonio
from proxy.identity import digest_of


def _expected(form: dict) -> str:
    return hashlib.blake2b(jsonio.dumps(form, sort_keys=True), digest_size=12).hexdigest()


@pytest.mark.parametrize("form", [
    {"role": "user", "content": "Say hello."},
    {"content": "ok", "role": "assistant", "tool_calls": [{"id": "c", "name": "ls"}]},
    {"role": "user", "content": "\ud800 lone"},  # orjson: JSONEncodeError
    {"role": "tool", "content": [{"n": 2 ** 70}]},  # orjson: TypeError (past 64 bits)
])
def test_the_digest_is_of_the_sorted_json_that_jsonio_writes(form: dict) -> None:
    assert digest_of(form) == _expected(form)
    assert digest_of(dict(reversed(form.items()))) == digest_of(form)


def test_a_plain_form_is_hashed_as_orjson_writes_it() -> None:
    form = {"role": "user", "content": "é"}
    data = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
    assert digest_of(form) == hashlib.blake2b(data, digest_size=12).hexdigest()
