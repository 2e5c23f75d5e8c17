"""The fake upstream's request validation, as pure functions (no I/O): the public entry points.

`check_chat` and `check_responses` answer `None` for a request a real provider would accept, or
the `Rejection` (status and exact error body) it would answer with. Tests of the proxy's
repair and sanitizer call them directly; the fake upstream calls them on every request.
Dialects: see `dialects.DIALECTS`; Responses rules: `responses_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from proxy.testing import rejections
from proxy.testing.chat_rules import find_violation, shape_violation
from proxy.testing.chat_wording import WORDING
from proxy.testing.dialects import DIALECTS
from proxy.testing.rejections import Rejection
from proxy.testing.responses_rules import checked_input
from proxy.testing.signing import DEFAULT_SIGNER, Signer
from proxy.testing.stored_items import Resolve

__all__ = ["DIALECTS", "Rejection", "check_chat", "check_responses", "check_responses_input"]


def check_chat(body: dict[str, Any], dialect: str = "openai", *,
               signer: Signer = DEFAULT_SIGNER) -> Rejection | None:
    spec = DIALECTS.get(dialect)
    if spec is None:
        raise ValueError(f"unknown dialect {dialect!r}; known: {', '.join(DIALECTS)}")
    wording = WORDING[spec.wording]
    if spec.options_need_stream and isinstance(body, Mapping) and _options_without_stream(body):
        return stream_options_without_stream()
    sent = isinstance(body, Mapping) and "messages" in body
    raw = body.get("messages") if sent else None
    shape = shape_violation(raw, sent=sent)
    if shape is not None:
        return wording(shape)
    messages = cast(list[dict[str, Any]], raw)
    for rule in spec.schema:
        found = rule(messages, signer)
        if found is not None:
            return found
    violation = find_violation(messages) if spec.pairing else None
    if violation is not None:
        return wording(violation)
    for rule in spec.semantic:
        found = rule(messages, signer)
        if found is not None:
            return found
    return None


def stream_options_without_stream() -> Rejection:
    """[OBS] text: quoted from Azure's answer and measured against OpenAI by client authors;
    param as two OpenAI-compatible reimplementations give it [3P]; code [MEM]."""
    return rejections.openai(
        "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        param="stream_options")


def _options_without_stream(body: Mapping[str, Any]) -> bool:
    # A null `stream_options` is no option.
    return body.get("stream_options") is not None and body.get("stream") is not True


# Responses' `stream_options` has one member [SRC openai-python `response_create_params.StreamOptions`].
_RESPONSES_STREAM_OPTIONS = ("include_obfuscation",)


def _unknown_stream_option(body: Mapping[str, Any]) -> Rejection | None:
    """Chat's `include_usage` (or any other member) in a Responses `stream_options` is an unknown
    parameter: text, param and code [OBS: quoted whole by clients that hit it; 3P: a table of
    direct-API probes]. Checked
    before the items, as unknown keys are [3P]; where OpenAI checks this nested one is not
    recorded."""
    options = body.get("stream_options")
    if not isinstance(options, Mapping):
        return None
    for key in options:
        if key not in _RESPONSES_STREAM_OPTIONS:
            param = f"stream_options.{key}"
            return rejections.openai(f"Unknown parameter: '{param}'.", param=param,
                                     code="unknown_parameter")
    return None


_STATE_KEYS = ("previous_response_id", "conversation", "prompt")


def _request_refusal(body: Mapping[str, Any]) -> Rejection | None:
    """A request with nothing to answer, or chat's stream options: no `input` at all (refused
    first), an unknown stream option, then an empty `input` and no earlier state to continue
    (texts, params, codes and their order around unknown keys as a table of direct-API probes
    records them [3P]). With `previous_response_id`, `conversation` or `prompt` the fake accepts
    an empty or absent input: the probes looked those ids up first."""
    stateless = all(body.get(key) is None for key in _STATE_KEYS)
    if stateless and "input" not in body:
        return rejections.openai("Missing required parameter: 'input'.", param="input",
                                 code="missing_required_parameter")
    refused = _unknown_stream_option(body)
    if refused is None and stateless and body["input"] in ("", []):
        refused = rejections.openai("One of \"input\" or \"previous_response_id\" or 'prompt' "
                                    "or 'conversation' must be provided.",
                                    code="missing_required_parameter")
    return refused


def check_responses(body: dict[str, Any], *,
                    verify_encrypted: Callable[..., bool] | None = None,
                    prior: Sequence[Any] = (),
                    signer: Signer = DEFAULT_SIGNER,
                    resolve: Resolve | None = None) -> Rejection | None:
    """`verify_encrypted(item, preceding_items) -> bool` checks `encrypted_content` (skipped when
    None); `prior` holds the items of stored earlier responses when `previous_response_id` is used;
    `resolve(id)` the stored item an `item_reference` names (None: unknown, OpenAI's 404), when
    given: without it a reference is taken as an item that is there."""
    checked = check_responses_input(body, verify_encrypted=verify_encrypted, prior=prior,
                                    signer=signer, resolve=resolve)
    return checked if isinstance(checked, Rejection) else None


def check_responses_input(body: dict[str, Any], *,
                          verify_encrypted: Callable[..., bool] | None = None,
                          prior: Sequence[Any] = (),
                          signer: Signer = DEFAULT_SIGNER,
                          resolve: Resolve | None = None) -> list[Any] | Rejection:
    """`check_responses`, answering the input items it checked (references expanded) when
    the request is accepted."""
    refused = _request_refusal(body)
    if refused is not None:
        return refused
    return checked_input(body, prior=prior, verify_encrypted=verify_encrypted, signer=signer,
                         resolve=resolve)
