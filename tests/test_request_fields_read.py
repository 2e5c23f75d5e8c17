"""The request fields read beside the list (`rules.request_definitions`, the output reservation
of `trigger.requested_output_tokens`) against plain readings of every name, present, null or
absent: the usual request's one-test short way must answer as the full reading does."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.trigger import requested_output_tokens
from proxy.tokens.rules import request_definitions

_SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
_values = st.sampled_from([None, 0, 7, True, "x", [], [{"name": "f"}], {}, {"format": _SCHEMA},
                           {"format": {"type": "text"}}, _SCHEMA, {"type": "json_object"}])
_docs = st.dictionaries(st.sampled_from(["functions", "text", "response_format", "max_tokens",
                                         "max_completion_tokens", "max_output_tokens", "model",
                                         "messages"]), _values)


def _definitions(doc: dict[str, Any]) -> Any:
    functions = doc.get("functions")
    text = doc.get("text")
    schema = text.get("format") if isinstance(text, dict) else doc.get("response_format")
    if not (isinstance(schema, dict) and schema.get("type") == "json_schema"):
        schema = None
    return (functions or None, schema) if functions or schema is not None else None


def _reserved(doc: dict[str, Any]) -> int:
    values = [doc.get(k) for k in ("max_tokens", "max_completion_tokens", "max_output_tokens")]
    return max([v for v in values if type(v) is int] or [0], default=0)


@given(_docs)
def test_definitions_read_as_the_full_reading_does(doc: dict[str, Any]) -> None:
    assert request_definitions(doc) == _definitions(doc)


@pytest.mark.parametrize("doc", [{"model": "m"}, {"functions": None}, {"functions": [{"name": "f"}]},
                                 {"response_format": _SCHEMA}, {"text": {"format": _SCHEMA}},
                                 {"text": None, "response_format": _SCHEMA}])
def test_each_name_alone_is_read(doc: dict[str, Any]) -> None:
    assert request_definitions(doc) == _definitions(doc)


@given(_docs)
def test_the_output_reservation_reads_as_the_full_reading_does(doc: dict[str, Any]) -> None:
    assert requested_output_tokens(doc) == max(_reserved(doc), 0)
