"""A request's list must hold objects (`inbound.checked_fields`): the check runs in C over
the whole list, and a refusal still names the first item that is not one, and its type."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.errors import BadRequest
from proxy.inbound import checked_fields

_ITEMS = st.one_of(st.fixed_dictionaries({"role": st.just("user")}), st.none(), st.integers(),
                   st.text(max_size=2), st.lists(st.integers(), max_size=1))


@given(st.lists(_ITEMS, min_size=1, max_size=6), st.sampled_from([Api.CHAT, Api.RESPONSES]))
def test_the_first_item_that_is_no_object_is_named(items: list[Any], api: Api) -> None:
    key = "messages" if api is Api.CHAT else "input"
    culprits = [i for i, item in enumerate(items) if not isinstance(item, dict)]
    if not culprits:
        assert checked_fields(api, {"model": "m", key: items}) == ("m", False, tuple(items))
        return
    with pytest.raises(BadRequest) as refused:
        checked_fields(api, {"model": "m", key: items})
    first = culprits[0]
    assert refused.value.message == (
        f"Each item of '{key}' must be an object; item {first} is "
        f"{type(items[first]).__name__}.")
    assert refused.value.param == f"{key}.[{first}]"
