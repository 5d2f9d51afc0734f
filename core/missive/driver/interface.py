"""The driver interface: what a backend plugin implements.

A driver class is named by a :class:`~missive.kernel.specs.DriverSpec` factory and
built once per configured model: ``factory(model_id, entry)``. The core calls:

* :meth:`Driver.start` when the server starts (load weights, open pools);
* :meth:`Driver.count_tokens` for ``/v1/messages/count_tokens`` (must not wait
  behind generation);
* :meth:`Driver.generate`, an async iterator of :mod:`missive.driver.events`;
  closing it early (client gone, stop sequence matched) must stop the
  backend's work;
* :meth:`Driver.aclose` at shutdown;
* :meth:`Driver.status` and :meth:`Driver.replica_pool`, optional, for
  ``GET /v1/status``, ``missive ps``, ``GET /readyz`` and ``/metrics``;
* :meth:`Driver.choices`, optional, for the start-up log.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..config import ModelEntry
from ..protocol.errors import PromptTooLongError
from ..protocol.schema.request import CountTokensRequest
from .capabilities import Capabilities
from .conversation import Conversation
from .events import GenerationEvent
from .parsing import ReasoningParser, ReasoningParserSpec, ToolParser, ToolParserSpec
from .thinking import ThinkingPlan
from .tools import ToolChoice, ToolDefinition


class ReplicaView(Protocol):
    """What the server reads of one replica of a remote backend
    (:class:`missive.remote.replicas.Replica`): ``/v1/status`` and ``/metrics``."""

    url: str
    healthy: bool
    outstanding: int
    last_error: str | None
    routed: Mapping[str, int]


class ReplicaPoolView(Protocol):
    """What the server reads of a remote backend's replicas
    (:class:`missive.remote.replicas.ReplicaPool`): ``/readyz``, ``/v1/status``
    and ``/metrics``."""

    @property
    def replicas(self) -> Sequence[ReplicaView]: ...

    def healthy(self) -> Sequence[ReplicaView]: ...

    async def check(self, wait: float | None = None) -> None: ...


__all__ = ["Driver", "GenerationRequest", "ReplicaPoolView", "ReplicaView", "clamp_max_tokens", "fit_prompt"]


@dataclass(frozen=True)
class GenerationRequest:
    """What the core hands a driver for one request.

    Attributes:
        request_id: ``req_...`` for logs.
        model: the configured model id serving the request.
        conversation: system prompt, turns and prefill (see :mod:`missive.messages.conversation`).
        max_tokens: requested output cap (before clamping to the context).
        temperature, top_p, top_k: sampling; None means the API default
            (temperature 1.0, no nucleus or top-k cut).
        stop_sequences: the core matches these on the text (do not pass them
            to a backend: it would cut the text before the core sees the match).
        request: the validated request as the client sent it. Drivers read
            the fields above instead (a driver reading the wire body is tied
            to the Messages API's shape); kept for plugins written before
            ``output_schema``.
        tools: the tools offered to the model (see :mod:`missive.tools.definitions`).
        listed_tools: the tool list at the top of the prompt when
            mid-conversation ``tool_addition``/``tool_removal`` blocks changed
            the tools (:mod:`missive.tools.changes`): the tools of ``tools``
            as declared, a removed one included, so the prompt before a
            change stays the same. None: the tools not ``deferred``. Read
            :meth:`prompt_tools`.
        tool_choice: mode, forced name and whether parallel calls are allowed.
            With mode ``none`` a driver must not let the model call tools.
        thinking: whether thinking blocks are wanted, the budget, the effort
            (see :mod:`missive.driver.thinking`). A driver turns the model's
            reasoning switch on or off accordingly; the core drops reasoning
            the client did not ask for.
        thinking_position: ``(assistant turn, first thinking block ordinal)``
            of the answer, for signatures (:mod:`missive.thinking.signing`).
        server_call: ``(server tool name, input)`` of a call the server
            makes and runs before the model answers (a forced ``web_search``
            the driver cannot force: :mod:`missive.tools.server_runner`);
            drivers ignore it (the pipeline sends them the conversation
            with the call and its result).
        output_schema: the JSON schema the answer must follow
            (``output_config.format``, or the older ``output_format``), None
            for free text.
        session: the client's session id (``x-claude-code-session-id``, or
            the one in ``metadata.user_id``), for drivers that prefer the
            cache of the request's own session (:mod:`missive.messages.session`).
        cache_scope: the prompt-cache scope of the request's API key
            (:func:`missive.config.keys.cache_scope_of`): a driver never
            serves it a prefix computed for a request of another scope
            (:attr:`missive.engine.runner.Prompt.cache_scope`; a backend
            with per-request isolation gets :meth:`cache_salt`). None: the
            server has no key, one scope for everyone.
    """

    request_id: str
    model: str
    conversation: Conversation
    max_tokens: int
    temperature: float | None
    top_p: float | None
    top_k: int | None
    stop_sequences: tuple[str, ...]
    request: CountTokensRequest
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    thinking: ThinkingPlan = ThinkingPlan()
    thinking_position: tuple[int, int] = (0, 0)
    server_call: tuple[str, dict[str, Any]] | None = None
    session: str | None = None
    output_schema: dict[str, Any] | None = None
    listed_tools: tuple[ToolDefinition, ...] | None = None
    cache_scope: str | None = None

    def cache_salt(self) -> str | None:
        """A backend's per-request cache isolation value for
        :attr:`cache_scope` (vLLM's ``cache_salt``): a digest, so the
        backend never sees a key's name; None without a scope."""
        if self.cache_scope is None:
            return None
        return hashlib.sha256(b"missive cache scope\x00" + self.cache_scope.encode("utf-8")).hexdigest()[:32]

    def prompt_tools(self) -> tuple[ToolDefinition, ...]:
        """The tools a driver that renders the prompt itself lists at its top:
        ``listed_tools``, else the tools not ``deferred`` (a deferred or
        added tool's definition stands where the conversation loaded it)."""
        if self.listed_tools is not None:
            return self.listed_tools
        return tuple(t for t in self.tools if not t.deferred)


class Driver(abc.ABC):
    """Base class of backend drivers.

    Subclasses set :attr:`capabilities` (usually the spec's, refined by model
    settings) and implement :meth:`generate` and :meth:`count_tokens`.
    """

    #: Registered driver name (set by the subclass).
    name: str = ""
    #: Registered tool parsers (set by the core when the driver is built), for
    #: drivers that parse tool calls out of generated text.
    tool_parser_specs: Mapping[str, ToolParserSpec] = {}
    #: Registered reasoning parsers (set by the core when the driver is built).
    reasoning_parser_specs: Mapping[str, ReasoningParserSpec] = {}
    #: The id of the model whose loaded driver this one serves through (a
    #: driver's ``settings.base``: one load for both), or None. The model
    #: table checks it, loads that model first, hands its driver to
    #: :meth:`bind_base` before :meth:`start`, keeps it loaded while this
    #: one is, and closes this one first (:mod:`missive.models.bases`).
    base: str | None = None

    def bind_base(self, base: Driver) -> None:  # noqa: B027 - optional hook
        """Take the loaded driver of :attr:`base` (before :meth:`start`).

        Raises:
            ConfigError: ``base`` cannot be shared (naming the setting).
        """

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities) -> None:
        self.model_id = model_id
        self.entry = entry
        self.capabilities = capabilities

    @property
    def context_window(self) -> int | None:
        """Tokens of context (prompt + output), None if unknown."""
        return self.entry.context_window

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Prepare to serve (load the model, check the backend). Raise to fail startup."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    async def status(self) -> dict[str, Any]:
        """What the driver can tell about its load and caches now, for
        ``GET /v1/status`` and ``missive ps`` (default: nothing).

        A flat JSON-able mapping, e.g. ``{"slots": 4, "slots_in_use": 1,
        "host_cache_bytes": ...}``. Called on the event loop, under a
        2-second limit; it must be cheap, and may ask the backend. An
        exception is shown as the status's ``error``.
        """
        return {}

    def counters(self) -> dict[str, int]:
        """Cumulative counts the driver keeps, for ``/metrics`` at scrape time
        (default: none): ``spec_decode_draft_tokens`` and
        ``spec_decode_accepted_tokens`` of a speculatively decoding engine.
        Synchronous and cheap (no backend call)."""
        return {}

    def choices(self) -> dict[str, Any]:
        """What the driver settled at start-up that the configuration left
        open, for the start-up log (``missive serve`` prints one line per
        model): e.g. ``{"context_window": 8192, "chat_template": "chatml",
        "tool_format": "hermes", "reasoning_format": "none"}``. Flat and
        JSON-able; called after :meth:`start`. Default: nothing."""
        return {}

    def prompt_cache_disk(self) -> dict[str, int]:
        """The counters of the model's prompt-cache disk tier
        (:mod:`missive.engine.disk_cache`: ``hits``, ``misses``, ``writes``,
        ``corrupt``, ``evictions``, ``bytes``, ``entries``) for ``/metrics``;
        empty (the default) for a driver without one."""
        return {}

    def replica_pool(self) -> ReplicaPoolView | None:
        """The :class:`~missive.remote.replicas.ReplicaPool` of a remote backend's
        replicas, None (the default) for a driver without one. ``/readyz``
        reports the model unavailable while none of its replicas is
        healthy; ``/metrics`` and ``/v1/status`` show each replica's health."""
        return None

    def tool_parser(self, request: GenerationRequest) -> ToolParser | None:
        """A parser for tool calls written as text, or None.

        Drivers whose backend returns tool calls natively yield tool call
        events and return None (the default). Drivers that render prompts
        themselves return the parser matching the model's format; the core
        then feeds it every :class:`~missive.driver.events.TextDelta`.
        """
        return None

    def reasoning_parser(self, request: GenerationRequest) -> ReasoningParser | None:
        """A parser separating reasoning from the answer in generated text, or None.

        Drivers whose backend separates reasoning (``reasoning_content``)
        yield :class:`~missive.driver.events.ThinkingDelta` and return None (the
        default). The core feeds the parser every
        :class:`~missive.driver.events.TextDelta` before the tool parser (see
        :mod:`missive.reasoning`), whether or not thinking was requested, so
        reasoning never leaks into the answer text.
        """
        return None

    def unenforced(self, request: GenerationRequest) -> list[str]:
        """Parts of ``request`` this driver takes but does not enforce: the
        JSON Schema keywords of ``output_config.format`` its grammar leaves
        out (``output_config.format #/properties/n/maximum``), for instance.

        The core reports them as ignored (the ``missive-ignored`` header and
        the log; a 400 in strict mode), as it does every part of a request it
        does not act on. Called once per prepared request that has an
        ``output_schema``, in a worker thread. Default: none.
        """
        return []

    @abc.abstractmethod
    async def count_tokens(self, request: GenerationRequest) -> int:
        """Exact prompt tokens of ``request`` as :meth:`generate` would report them
        (``input_tokens`` + cache fields of its :class:`~missive.driver.events.Started`).

        Raises:
            MissiveError: e.g. a template rejecting the conversation.
        """

    @abc.abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Generate the answer as events (order in :mod:`missive.driver.events`).

        Raises:
            PromptTooLongError: before ``Started``, if the prompt does not fit.
            MissiveError: any other failure, before or after ``Started``.
        """


def clamp_max_tokens(max_tokens: int, prompt_tokens: int, context_window: int | None) -> int:
    """``max_tokens`` limited to what the context leaves after the prompt.

    Contract section 5: clamping is preferred to a 400; the answer then ends
    with ``stop_reason: "max_tokens"`` when it reaches the clamp.
    """
    if context_window is None:
        return max_tokens
    return max(0, min(max_tokens, context_window - prompt_tokens))


def fit_prompt(max_tokens: int, prompt_tokens: int, context_window: int | None) -> int:
    """The prompt-fit rule every driver applies before ``Started``: a prompt
    that leaves no token to answer is refused, else ``max_tokens`` is
    clamped to what the context leaves (:func:`clamp_max_tokens`).

    Contract section 5: ``prompt is too long: N tokens > M maximum`` with
    M = context - 1, since one token must be left for the answer.

    Raises:
        PromptTooLongError: ``prompt_tokens >= context_window``.
    """
    if context_window is not None and prompt_tokens >= context_window:
        raise PromptTooLongError(prompt_tokens, context_window - 1)
    return clamp_max_tokens(max_tokens, prompt_tokens, context_window)
