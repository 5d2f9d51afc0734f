"""OpenAI's error envelope for the core's errors.

The wire format (OpenAI API reference, "Error codes"; the ``openai`` Python
SDK's ``APIStatusError``, which reads ``body["error"]``) is::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "n", "code": null}}

The SDKs choose the exception class from the HTTP status alone (400
``BadRequestError``, 401, 403, 404, 409, 422, 429, >= 500
``InternalServerError``), so the status is the part that matters; ``type``
follows OpenAI's own values (``invalid_request_error`` for the 4xx it
answers, ``server_error`` for 5xx) and ``code`` the ones its clients test
(``invalid_api_key``, ``model_not_found``, ``rate_limit_exceeded``,
``context_length_exceeded``).

The core's checks of the Messages request a door builds (:class:`Paths`)
name Messages paths and words (``messages.1: `tool_use` ids were found
without `tool_result` blocks``, ``tools.0.input_schema.type``, ``tool_choice
"any"``): :meth:`Paths.error` names the request's own field instead, as
``param`` and in the message (``messages[2]``, ``tools[0].function.parameters``,
``input[3].call_id``), in the door's words (a tool call, a tool message or a
``function_call_output`` item; ``"required"``, a named function;
``parameters``; ``max_completion_tokens``, ``max_output_tokens``; ``stop``),
pydantic's wordings in plain ones (:func:`plain`), and an error about the
request a fallback of the model would get (``fallbacks.0: ...``) as such.

Missive's ``529 overloaded_error`` (a full admission queue) is sent as
``503``, the status OpenAI uses for an overloaded engine: OpenAI clients
retry a 503 with its ``retry-after`` and know no 529.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from missive.api import ConflictingKeys, InvalidRequestError, MissingKey, MissiveError, UnknownKey

from .turns import Origin, ToolIds, Turns, bracketed

__all__ = ["OpenAIRequestError", "Paths", "envelope", "status_of", "masked", "NO_KEY"]

#: Missive's ``error.type`` -> OpenAI's ``(type, code)``.
_TYPES: dict[str, tuple[str, str | None]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "permission_error": ("invalid_request_error", "permission_denied"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("rate_limit_exceeded", "rate_limit_exceeded"),
    "overloaded_error": ("server_error", "overloaded"),
    "timeout_error": ("server_error", "timeout"),
}


class OpenAIRequestError(InvalidRequestError):
    """A 400 about the OpenAI request itself, naming its ``param``
    (``messages[2].tool_calls[0].function.arguments``) and, when OpenAI
    has one, its ``code``."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def status_of(error: MissiveError) -> int:
    """The HTTP status OpenAI clients get for ``error`` (529 as 503)."""
    return 503 if error.status == 529 else error.status


#: OpenAI's 401 for a request with no key (its API's answer to a request
#: without an ``Authorization`` header, quoted by its "Error codes" guide).
NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)


def masked(key: str) -> str:
    """``key`` as OpenAI quotes a wrong one: its first 4 and last 2
    characters (``sk-w***ng``); a key under 8 characters as ``***``."""
    return f"{key[:4]}***{key[-2:]}" if len(key) >= 8 else "***"


def _auth_message(error: MissiveError) -> str:
    """``error``'s message in OpenAI's terms when it is the core's 401 for a
    missing or unknown key (OpenAI, "Error codes": "401 - Incorrect API key
    provided"), not about the ``x-api-key`` header an OpenAI client never sends."""
    if isinstance(error, MissingKey):
        return NO_KEY
    if isinstance(error, UnknownKey):
        return f"Incorrect API key provided: {masked(error.presented)}."
    if isinstance(error, ConflictingKeys):
        return (
            "The Authorization: Bearer and x-api-key headers name different API keys; "
            "send one key (Authorization: Bearer YOUR_KEY)."
        )
    return error.message


def envelope(error: MissiveError) -> dict[str, Any]:
    """OpenAI's error body for ``error``."""
    kind, code = _TYPES.get(error.error_type, ("server_error", None))
    param = getattr(error, "param", None)
    if isinstance(error, OpenAIRequestError):
        code = error.code
    elif error.error_type == "not_found_error" and error.message.startswith("model:"):
        code, param = "model_not_found", "model"
    elif "prompt is too long" in error.message:
        code = "context_length_exceeded"
    if status_of(error) >= 500:
        kind = "server_error"
    return {"error": {"message": _auth_message(error), "type": kind, "param": param, "code": code}}


#: A line of a core error that starts with a Messages path.
_PATH = re.compile(r"^(?P<path>(?:[A-Za-z_]+|\d+)(?:\.(?:[A-Za-z_]+|\d+))*): ")
#: A core error about the request a fallback of the model was sent
#: (:mod:`missive.routing.chain`: ``fallbacks.1: max_tokens: ...``, or
#: ``fallbacks.1.model: ...``, the fallbacks of the model's configuration).
_FALLBACK = re.compile(r"^fallbacks\.(?P<index>\d+)(?P<model>\.model)?: ")
#: The Messages request's fields a core error's path can start with.
_REQUEST_FIELDS = frozenset(
    {
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "stop_sequences",
        "output_config",
        "thinking",
    }
    | {"temperature", "top_p", "model", "metadata"}
)
#: A capability the core names (``CapabilityError``) -> the request's ``param``.
_CAPABILITY_PARAMS = (
    ("strict tools", "tools"),
    ("tools with tool_choice", "tool_choice"),
    ("tool_use/tool_result", "messages"),
    ("input media type", "messages"),
    ("output_config.format", "output_config.format"),
    ("stop_sequences", "stop_sequences"),
    ("temperature", "temperature"),
    ("top_p", "top_p"),
)


#: Pydantic's wordings in the core's 400s (the Messages body's validation,
#: :func:`missive.protocol.validation.format_validation_error`) -> plain words
#: about the request, as the door's own checks write them (``expected ...``).
_PYDANTIC: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), plain)
    for pattern, plain in (
        (r"List should have at least 1 item after validation, not 0", "expected a non-empty list"),
        (
            r"List should have at least (\d+) items? after validation, not (\d+)",
            r"expected at least \1 items, got \2",
        ),
        (
            r"List should have at most (\d+) items? after validation, not (\d+)",
            r"expected at most \1 items, got \2",
        ),
        (r"String should have at least 1 character", "expected a non-empty string"),
        (r"String should have at least (\d+) characters", r"expected a string of at least \1 characters"),
        (r"String should have at most (\d+) characters", r"expected a string of at most \1 characters"),
        (r"String should match pattern '(.*)'", r"expected a string matching \1"),
        (r"Input should be a valid dictionary[^;]*", "expected an object"),
        (r"Input should be a valid (string|list|boolean)[^;]*", r"expected a \1"),
        (r"Input should be a valid (integer|number)[^;]*", r"expected an? \1"),
        (r"Input should be greater than or equal to", "expected a value >="),
        (r"Input should be less than or equal to", "expected a value <="),
        (r"Input should be greater than", "expected a value >"),
        (r"Input should be less than", "expected a value <"),
        (r"Input should be", "expected"),
        (r"Field required", "a required field is missing"),
        (r"Extra inputs are not permitted", "unknown field"),
    )
)


def plain(text: str) -> str:
    """``text`` with pydantic's wordings (:data:`_PYDANTIC`) in plain words."""
    for pattern, words in _PYDANTIC:
        text = pattern.sub(words, text)
    return text


@dataclass
class Paths:
    """Where the parts of a translated request came from, and the door's
    words, to put the core's errors about it in the request's terms.

    Attributes:
        turns: the messages' :class:`~.turns.Turns` (their origins).
        system: each ``system`` block's path in the request.
        tools: each Messages tool's origin (``tools[2].function``, fields
            ``input_schema`` -> ``parameters``).
        fields: Messages paths -> the request's (``max_tokens`` ->
            ``max_completion_tokens``, ``output_config.format`` ->
            ``response_format``); the longest prefix applies.
        words: the door's words for the Messages API's, in order.
        ids: the tool-call ids sent for others (named as the originals).
    """

    turns: Turns
    system: list[str] = field(default_factory=list)
    tools: list[Origin] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    words: tuple[tuple[str, str], ...] = ()
    ids: ToolIds = field(default_factory=ToolIds)

    def param(self, path: str) -> str:
        """The request's path of the Messages path ``path`` (``messages.1.content.0.input``)."""
        parts = path.split(".")
        index = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        if parts[0] == "messages" and index is not None:
            if len(parts) > 3 and parts[2] == "content" and parts[3].isdigit():
                origin = self.turns.origin(index, int(parts[3]))
                if origin is not None:
                    return origin.at(parts[4:])
            start = self.turns.start(index)
            if start is not None:
                return start + bracketed(parts[2:])
        if parts[0] == "system" and index is not None and index < len(self.system):
            return self.system[index]
        if parts[0] == "tools" and index is not None and index < len(self.tools):
            return self.tools[index].at(parts[2:])
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in self.fields:
                return self.fields[head] + bracketed(parts[cut:])
        return parts[0] + bracketed(parts[1:])

    def say(self, text: str) -> str:
        """``text`` in the door's words, the tool-call ids as the request sent them."""
        for word, door in self.words:
            text = text.replace(word, door)
        return self.ids.outward(text)

    def error(self, error: MissiveError) -> MissiveError:
        """``error`` in the request's terms: a 400 of the core's (its lines
        that start with a Messages path, or a capability it names) becomes
        an :class:`OpenAIRequestError` naming the request's ``param``; any
        other error is returned as it is."""
        if not isinstance(error, InvalidRequestError) or isinstance(error, OpenAIRequestError):
            return error
        param = None
        lines = []
        message, fallback = error.message, _FALLBACK.match(error.message)
        if fallback is not None:  # the whole message is about that fallback's request
            message = message[fallback.end() :]
            param = "model" if fallback.group("model") else None
        for line in message.split("; "):
            found = _PATH.match(line)
            if found is not None and found.group("path").split(".")[0] in _REQUEST_FIELDS:
                path, rest = found.group("path"), line[found.end() :]
                below = _PATH.match(
                    rest
                )  # a part's check naming a path below it: tools.1: input_schema.type: ...
                if below is not None:
                    path, rest = f"{path}.{below.group('path')}", rest[below.end() :]
                where = self.param(path)
                param = param or where
                line = f"{where}: {rest}"
            lines.append(self.say(plain(line)))
        if param is None:
            named = next((p for word, p in _CAPABILITY_PARAMS if error.message.startswith(word)), None)
            param = self.param(named) if named else None
        code = "context_length_exceeded" if "prompt is too long" in error.message else None
        if param is None and ("prompt is too long" in error.message or "chat template" in error.message):
            param = self.param("messages")
        text = "; ".join(lines)
        if fallback is not None:
            text = f"the request as sent to the model's fallback {fallback.group('index')}: {text}"
        translated = OpenAIRequestError(text, param=param, code=code)
        translated.status = error.status  # type: ignore[misc]  # the core's 4xx is kept
        return translated


#: The Messages API's words for the tool loop -> Chat Completions'.
CHAT_WORDS: tuple[tuple[str, str], ...] = (
    ("`tool_use` ids", "tool call ids"),
    ("`tool_result` blocks", "tool messages"),
    ("`tool_use` blocks", "tool calls"),
    ("`tool_result` block", "tool message"),
    ("`tool_use` block", "tool call"),
    ("`tool_use_id`", "`tool_call_id`"),
    ("tool_use/tool_result content blocks", "tool calls and tool messages"),
    ("in the previous message", "in an assistant message before it"),
    ("in the next message", "right after it"),
)
#: The Messages API's words for the tool loop -> Responses'.
RESPONSES_WORDS: tuple[tuple[str, str], ...] = (
    ("`tool_use` ids", "`function_call` call_ids"),
    ("`tool_result` blocks", "`function_call_output` items"),
    ("`tool_use` blocks", "`function_call` items"),
    ("`tool_result` block", "`function_call_output` item"),
    ("`tool_use` block", "`function_call` item"),
    ("`tool_use_id`", "`call_id`"),
    ("tool_use/tool_result content blocks", "function_call and function_call_output items"),
    ("in the previous message", "before it"),
    ("in the next message", "right after it"),
)
#: Words both doors change.
COMMON_WORDS: tuple[tuple[str, str], ...] = (
    ('"any"', '"required"'),
    ('"tool"', "a named function"),
    ("input_schema", "parameters"),
    ("text content blocks", "text content"),
)
