"""More of OpenAI's value rules for fields the door otherwise accepts (as
:mod:`.limits`): a value OpenAI answers with a 400 is a 400 here too, in
OpenAI's words, naming the field.

* a JSON schema output format's ``name`` (API reference, "Create a model
  response", ``text.format.name``; "Create chat completion",
  ``response_format.json_schema.name``: "The name of the response format.
  Must be a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum
  length of 64"; required: OpenAI answers "Missing required parameter:
  'text.format.name'.", ``code: "missing_required_parameter"``);
* ``service_tier``: ``auto``, ``default``, ``flex``, ``scale``, ``priority``
  (both references, ``service_tier``);
* Responses' ``include``: the values of the reference's list (the
  ``openai`` SDK's ``ResponseIncludable``);
* ``top_logprobs``: an integer 0-20; Chat's ``frequency_penalty`` and
  ``presence_penalty``: a number between -2.0 and 2.0 (both references);
* ``tool_choice`` as a string: ``none``, ``auto`` or ``required``, the value
  named when it is another (OpenAI: "Invalid value: 'sometimes'. Supported
  values are: 'none', 'auto', and 'required'.");
* input item ids used once (OpenAI: "Duplicate item found with id msg_1.
  Remove duplicate items from your input and try again.", ``param: "input"``).
"""

from __future__ import annotations

import re
from typing import Any

from .common import bad
from .errors import OpenAIRequestError

__all__ = [
    "SERVICE_TIERS",
    "INCLUDABLE",
    "check_format_name",
    "check_service_tier",
    "check_include",
    "check_logprobs_and_penalties",
    "check_tool_choice_value",
    "check_item_ids",
]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority")
INCLUDABLE = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
_CHOICES = ("none", "auto", "required")
MAX_TOP_LOGPROBS = 20


def _supported(values: tuple[str, ...]) -> str:
    quoted = [f"'{v}'" for v in values]
    return ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _invalid_value(value: Any, values: tuple[str, ...], param: str) -> OpenAIRequestError:
    return bad(
        f"Invalid value: '{value}'. Supported values are: {_supported(values)}.", param, "invalid_value"
    )


def check_format_name(fmt: dict[str, Any], where: str) -> None:
    """A ``json_schema`` format's ``name`` (at ``where.name``) is given and
    matches OpenAI's pattern."""
    if fmt.get("type") != "json_schema":
        return
    name = fmt.get("name")
    if name is None:
        raise bad(
            f"Missing required parameter: '{where}.name'.", f"{where}.name", "missing_required_parameter"
        )
    if not isinstance(name, str) or not _NAME.match(name):
        raise bad(
            f"Invalid '{where}.name': string does not match pattern. Expected a string that matches the "
            "pattern '^[a-zA-Z0-9_-]+$' with at most 64 characters.",
            f"{where}.name",
            "invalid_value",
        )


def check_service_tier(raw: dict[str, Any]) -> None:
    value = raw.get("service_tier")
    if value is not None and value not in SERVICE_TIERS:
        raise _invalid_value(value, SERVICE_TIERS, "service_tier")


def check_include(include: list[str]) -> None:
    for i, value in enumerate(include):
        if value not in INCLUDABLE:
            raise _invalid_value(value, INCLUDABLE, f"include[{i}]")


def check_logprobs_and_penalties(raw: dict[str, Any], penalties: bool) -> None:
    """``top_logprobs`` (0-20) and, with ``penalties`` (Chat), the two
    penalties (-2 to 2)."""
    top = raw.get("top_logprobs")
    if top is not None:
        if not isinstance(top, int) or isinstance(top, bool):
            raise bad("Invalid type for 'top_logprobs': expected an integer.", "top_logprobs", "invalid_type")
        if not 0 <= top <= MAX_TOP_LOGPROBS:
            side, bound = (
                ("above maximum", f"<= {MAX_TOP_LOGPROBS}") if top > 0 else ("below minimum", ">= 0")
            )
            raise bad(
                f"Invalid 'top_logprobs': integer {side} value. "
                f"Expected a value {bound}, but got {top} instead.",
                "top_logprobs",
                "integer_above_max_value" if top > 0 else "integer_below_min_value",
            )
    for name in ("frequency_penalty", "presence_penalty") if penalties else ():
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise bad(f"Invalid type for '{name}': expected a number.", name, "invalid_type")
        if not -2 <= value <= 2:
            side, bound = ("above maximum", "<= 2") if value > 2 else ("below minimum", ">= -2")
            raise bad(
                f"Invalid '{name}': decimal {side} value. Expected a value {bound}, but got {value} instead.",
                name,
                "decimal_above_max_value" if value > 2 else "decimal_below_min_value",
            )


def check_tool_choice_value(raw: dict[str, Any]) -> None:
    """``tool_choice`` as a string is one of OpenAI's three, checked before
    whether tools were given, so the value itself is what is named."""
    value = raw.get("tool_choice")
    if isinstance(value, str) and value not in _CHOICES:
        raise _invalid_value(value, _CHOICES, "tool_choice")


def check_item_ids(raw: Any) -> None:
    """Responses ``input`` items each with their own ``id``."""
    if not isinstance(raw, list):
        return
    seen: set[str] = set()
    for item in raw:
        item_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(item_id, str):
            continue
        if item_id in seen:
            raise bad(
                f"Duplicate item found with id {item_id}. "
                "Remove duplicate items from your input and try again.",
                "input",
            )
        seen.add(item_id)
