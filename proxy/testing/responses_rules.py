"""What OpenAI's Responses API checks in `input` items, with its exact texts (PROTOCOL.md §2.3).

Item-local checks (a chat-style `tool` role, a server item without its required `id`, unknown
keys) name `input[i]`; the rest look at the whole chain: items of stored earlier responses
(`prior`, when `previous_response_id` is used) followed by this request's items, each
`item_reference` replaced by the stored item it names when the store is given. Calls pair
with outputs by `call_id`; a reasoning item is followed by what it produced; ids the fake issued
next to a reasoning item need that item (`ws_…` ids too, for tests that replay server tool
calls); `store: false` cannot refer to items by id; an item id appears once; encrypted
reasoning must belong to its history.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy.testing import rejections
from proxy.testing.chat_wording import type_name
from proxy.testing.rejections import Rejection
from proxy.testing.signing import DEFAULT_SIGNER, Signer
from proxy.testing.stored_items import Resolve, expand, is_reference

Item = Mapping[str, Any]
VerifyEncrypted = Callable[[Item, Sequence[Any]], bool]

_COMMON = {"type", "id", "status"}
_KNOWN_KEYS: dict[str, set[str]] = {
    "message": _COMMON | {"role", "content", "phase"},
    "function_call": _COMMON | {"call_id", "name", "arguments", "namespace", "caller"},
    "function_call_output": _COMMON | {"call_id", "output", "name", "namespace", "caller"},
    "custom_tool_call": _COMMON | {"call_id", "name", "input", "namespace"},
    "custom_tool_call_output": _COMMON | {"call_id", "output"},
    "reasoning": _COMMON | {"summary", "content", "encrypted_content"},
    "compaction": _COMMON | {"encrypted_content"},
    "item_reference": {"type", "id"},
    # Tool items the model makes and the client runs or replays (openai-python
    # `response_input_item_param.py`): what the proxy must not add keys to.
    "web_search_call": _COMMON | {"action"},
    "computer_call": _COMMON | {"call_id", "action", "actions", "pending_safety_checks"},
    "computer_call_output": _COMMON | {"call_id", "output", "acknowledged_safety_checks"},
    "local_shell_call": _COMMON | {"call_id", "action"},
    "local_shell_call_output": _COMMON | {"call_id", "output"},
    "shell_call": _COMMON | {"call_id", "action", "caller", "environment"},
    "shell_call_output": _COMMON | {"call_id", "output", "caller", "max_output_length"},
    "apply_patch_call": _COMMON | {"call_id", "operation", "caller"},
    "apply_patch_call_output": _COMMON | {"call_id", "output", "caller"},
}
# Outputs that are not text: a screenshot object, a list of command outcomes.
_OUTPUT_SHAPE: dict[str, tuple[type, str]] = {
    "computer_call_output": (Mapping, "an object"),
    "shell_call_output": (list, "an array"),
}
# Calls the client must answer; other `*_call` items (server tools) have no output item.
# [OBS] for the local shell ("No tool output found for local shell call call_...",
# openai/openai-agents-python#1855); the shell and apply-patch tools are client-run the same way.
# A computer call's: [OBS] "No tool output found for computer call call_...", met and worked
# around by several computer-use clients.
_NEEDS_OUTPUT = ("function_call", "custom_tool_call", "local_shell_call", "shell_call",
                 "apply_patch_call", "computer_call")
# Input items whose `id` is required (openai-python `response_input_item_param.py`).
ID_REQUIRED = frozenset({
    "web_search_call", "file_search_call", "computer_call", "code_interpreter_call",
    "image_generation_call", "local_shell_call", "mcp_call", "mcp_list_tools",
    "mcp_approval_request",
})

# Fields each type requires besides `type`, in the order the SDK types list them (PROTOCOL.md
# §6.2, §4.2: a reasoning item's `id` is listed too, but clients that drop it with `store: false`
# are served, so it is not enforced here). The answer's text, param and code are [OBS] for
# `call_id`, `output` and `summary`; which field is named first when several miss is [MEM].
_REQUIRED: dict[str, tuple[str, ...]] = {
    "function_call": ("arguments", "call_id", "name"),
    "function_call_output": ("call_id", "output"),
    "custom_tool_call": ("call_id", "input", "name"),
    "custom_tool_call_output": ("call_id", "output"),
    "reasoning": ("summary",),
}

# The prefix an item's own id must have. [OBS] text and param, quoted whole in many client
# reports (PROTOCOL.md §2.3 has only its end); code as two reports print it (one fixture has
# `invalid_value`). A custom tool call's 'ctc': [OBS] the same text with 'ctc', quoted by
# several gateways that replayed a freeform call with a function call's `fc_` id (one with
# the code `invalid_id_prefix`). Outputs' prefixes (`fc_`? `ctco_`?) have one source or none:
# not enforced.
_ID_PREFIX = {"function_call": "fc", "custom_tool_call": "ctc", "reasoning": "rs", "message": "msg"}


def input_items(body: Mapping[str, Any]) -> list[Any]:
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def item_type(item: Any) -> str:
    if not isinstance(item, Mapping):
        return ""
    if is_reference(item):
        return "item_reference"
    return item.get("type") or "message"


def check_items(body: Mapping[str, Any], *, prior: Sequence[Any] = (),
                verify_encrypted: VerifyEncrypted | None = None,
                signer: Signer = DEFAULT_SIGNER,
                resolve: Resolve | None = None) -> Rejection | None:
    checked = checked_input(body, prior=prior, verify_encrypted=verify_encrypted, signer=signer,
                            resolve=resolve)
    return checked if isinstance(checked, Rejection) else None


def checked_input(body: Mapping[str, Any], *, prior: Sequence[Any] = (),
                  verify_encrypted: VerifyEncrypted | None = None,
                  signer: Signer = DEFAULT_SIGNER,
                  resolve: Resolve | None = None) -> list[Any] | Rejection:
    """The request's input items as upstream reads them (each `item_reference` replaced by the
    stored item it names, when `resolve` is given), or the rejection for the first rule they
    break. Without `resolve` a reference stands for an item that is there, whatever it is.
    One expansion serves the rules and what follows them (the count, the stored chain)."""
    items = input_items(body)
    for i, item in enumerate(items):
        found = _item_rule(i, item)
        if found is not None:
            return found
    refused = _not_persisted(body, items) or _duplicate([*prior, *items])
    if refused is not None:
        return refused
    if resolve is not None:
        expanded = expand(items, resolve)
        if isinstance(expanded, Rejection):
            return expanded
        items = expanded
    chain = [*prior, *items]
    found = (_pairing(chain) or _reasoning_followed(chain)
             or _required_reasoning(chain, signer) or _encrypted(chain, verify_encrypted))
    return found if found is not None else items


def _item_rule(i: int, item: Any) -> Rejection | None:
    if not isinstance(item, Mapping):
        # OpenAI's `invalid_type` family names the type it got [3P: direct-API probes]; what it
        # says it expects of an input item is [MEM].
        return rejections.openai(f"Invalid type for 'input[{i}]': expected an object, but got "
                                 f"{type_name(item)} instead.", param=f"input[{i}]",
                                 code="invalid_type")
    kind = item_type(item)
    if kind == "message":
        found = _message_rule(i, item)
        if found is not None:
            return found
    item_id = item.get("id")
    absent = [k for k in _REQUIRED.get(kind, ()) if k not in item]
    if kind in ID_REQUIRED and not isinstance(item_id, str):
        absent.insert(0, "id")  # required by the SDK's types
    if absent:
        param = f"input[{i}].{absent[0]}"
        return rejections.openai(f"Missing required parameter: '{param}'.", param=param,
                                 code="missing_required_parameter")
    prefix = _ID_PREFIX.get(kind)
    if prefix is not None and isinstance(item_id, str) and not item_id.startswith(prefix):
        param = f"input[{i}].id"
        return rejections.openai(f"Invalid '{param}': '{item_id}'. Expected an ID that begins "
                                 f"with '{prefix}'.", param=param, code="invalid_id_prefix")
    shape = _OUTPUT_SHAPE.get(kind)
    if shape is not None and not isinstance(item.get("output"), shape[0]):
        # The family's wording, as for a non-object item above; the expected part [MEM].
        param = f"input[{i}].output"
        return rejections.openai(f"Invalid type for '{param}': expected {shape[1]}, but got "
                                 f"{type_name(item.get('output'))} instead.", param=param,
                                 code="invalid_type")
    known = _KNOWN_KEYS.get(kind)
    unknown = [k for k in item if known is not None and k not in known]
    if unknown:  # [OBS]
        param = f"input[{i}].{unknown[0]}"
        return rejections.openai(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
    return None


_MESSAGE_ROLES = ("assistant", "system", "developer", "user")
_ASSISTANT_PARTS = ("output_text", "refusal")


def _message_rule(i: int, item: Item) -> Rejection | None:
    """A message's role, content and (the assistant's) part types, in OpenAI's words [OBS]:
    a chat-style `tool` role (Chevey339/kelivo PR#281), with param `input[i]` and code as
    quoted for another role outside the list (a client's notes quoting the whole body); a null
    content (QuantumNous/new-api#4776 and the same notes); an assistant's `input_text` part
    (openai/openai-java#302, tinyhumansai/openhuman#3624: param and code)."""
    role = item.get("role")
    if role not in _MESSAGE_ROLES:
        shown = role if isinstance(role, str) else ""
        return rejections.openai(f"Invalid value: '{shown}'. Supported values are: 'assistant', "
                                 "'system', 'developer', and 'user'.", param=f"input[{i}]",
                                 code="invalid_value")
    content = item.get("content")
    if not isinstance(content, (str, list)):
        param = f"input[{i}].content"
        return rejections.openai(f"Invalid type for '{param}': expected one of an array of objects "
                                 f"or string, but got {type_name(content)} instead.", param=param,
                                 code="invalid_type")
    if role != "assistant" or not isinstance(content, list):
        return None
    for j, part in enumerate(content):
        found = part.get("type") if isinstance(part, Mapping) else None
        if found not in _ASSISTANT_PARTS:
            return rejections.openai(f"Invalid value: '{found}'. Supported values are: "
                                     "'output_text' and 'refusal'.", param=f"input[{i}].content[{j}]",
                                     code="invalid_value")
    return None


def _not_persisted(body: Mapping[str, Any], items: Sequence[Any]) -> Rejection | None:
    if body.get("store") is not False:
        return None
    for item in items:
        kind = item_type(item)
        bare_reasoning = kind == "reasoning" and not item.get("encrypted_content")
        if bare_reasoning or kind == "item_reference":  # [OBS], HTTP 404
            return rejections.openai(
                f"Item with id '{item.get('id', '')}' not found. Items are not persisted when "
                "`store` is set to false. Try again with `store` set to true, or remove this item "
                "from your input.", param="input", status=404)
    return None


def _duplicate(chain: Sequence[Any]) -> Rejection | None:
    """[OBS] text, param and code (openai/openai-agents-python#1789, continuedev/continue#10723):
    an id sent twice, an inline item sent again while `previous_response_id` or `conversation`
    already holds it (microsoft/agent-framework PR#5690), or two references to one item
    (mastra-ai/mastra#21409). Checked on the ids as sent, a reference counting by the id it
    names, so a reference to an item the same request sends inline is this error, not the 404
    of an unknown id [inferred: which of the two OpenAI checks first is not verified]."""
    seen: set[str] = set()
    for item in chain:
        item_id = item.get("id") if isinstance(item, Mapping) else None
        # A local shell output may name its call in `id` (see `_pairing`): not an item id.
        if not isinstance(item_id, str) or item_type(item) == "local_shell_call_output":
            continue
        if item_id in seen:
            return rejections.openai(f"Duplicate item found with id {item_id}. Remove duplicate "
                                     "items from your input and try again.", param="input")
        seen.add(item_id)
    return None


def _label(kind: str) -> str:
    return kind.replace("_", " ")


def _pairing(chain: Sequence[Any]) -> Rejection | None:
    open_calls: dict[str, str] = {}
    known_calls: set[str] = set()
    for item in chain:
        kind = item_type(item)
        call_id = item.get("call_id")
        if kind == "local_shell_call_output" and call_id is None:
            # The SDK types name the call in `id`; the server reads `call_id` [OBS
            # openai/openai-agents-python#1855]. Either is taken here.
            call_id = item.get("id")
        if kind.endswith("_call_output"):
            if call_id not in known_calls:  # [OBS]
                return rejections.openai(f"No tool call found for {_label(kind[:-7])} output with "
                                         f"call_id {call_id}.", param="input")
            open_calls.pop(call_id, None)
        elif kind.endswith("_call") and isinstance(call_id, str):
            known_calls.add(call_id)
            if kind in _NEEDS_OUTPUT:
                open_calls[call_id] = kind
    for call_id, kind in open_calls.items():  # [OBS]
        return rejections.openai(f"No tool output found for {_label(kind)} {call_id}.", param="input")
    return None


def _produced(item: Any) -> bool:
    kind = item_type(item)
    return ((kind == "message" and item.get("role") == "assistant") or kind.endswith("_call")
            or kind in ("mcp_list_tools", "mcp_approval_request"))


def _reasoning_followed(chain: Sequence[Any]) -> Rejection | None:
    for k, item in enumerate(chain):
        if item_type(item) == "reasoning" and (k + 1 == len(chain) or not _produced(chain[k + 1])):
            return rejections.openai(  # [OBS]
                f"Item '{item.get('id', '')}' of type 'reasoning' was provided without its "
                "required following item.", param="input")
    return None


def _required_reasoning(chain: Sequence[Any], signer: Signer) -> Rejection | None:
    # An item_reference left in the chain (no store given to expand it) stands for a stored
    # item (`store` on; `_not_persisted` refuses it otherwise): a reasoning item sent by
    # reference is there.
    present = {item.get("id") for item in chain if item_type(item) in ("reasoning", "item_reference")}
    for item in chain:
        needed = signer.required_reasoning(item.get("id"))
        if needed is not None and needed not in present:  # [OBS]
            return rejections.openai(
                f"Item '{item['id']}' of type '{item_type(item)}' was provided without its "
                f"required 'reasoning' item: '{needed}'.", param="input")
    return None


def _encrypted(chain: Sequence[Any], verify: VerifyEncrypted | None) -> Rejection | None:
    if verify is None:
        return None
    for k, item in enumerate(chain):
        if item_type(item) != "reasoning" or not isinstance(item.get("encrypted_content"), str):
            continue
        if not verify(item, chain[:k]):
            return invalid_encrypted(item)
    return None


def invalid_encrypted(item: Item) -> Rejection:
    """[OBS] the newer text names the item; the older one quotes the blob."""
    if isinstance(item.get("id"), str):
        message = (f"The encrypted content for item {item['id']} could not be verified. "
                   "Reason: Encrypted content could not be decrypted or parsed.")
    else:
        message = f"The encrypted content {item.get('encrypted_content')} could not be verified."
    return rejections.openai(message, code="invalid_encrypted_content")
