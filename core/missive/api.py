"""The plugin API: every name a plugin may import from Missive, in one place.

A plugin (a driver, a parser, a processor, a distribution's defaults) imports
from ``missive.api`` and nothing else of the core; its tests may also use the
test kit, :mod:`missive.testing`. What is here is covered by the compatibility
promise of :data:`API_VERSION` (docs/hooks.md, "Compatibility"); the other
modules of the core may change in any release.

The names, grouped by what they are for:

* declaring a plugin: :data:`hookimpl`, the specs registration hooks return
  (:class:`DriverSpec`, :class:`DefaultModel`, ...), :func:`load_object`,
  :data:`API_VERSION` (the version of this API; a plugin declares the one it
  was built for as ``MISSIVE_API = "1"``, checked when it is loaded:
  :mod:`missive.kernel.compat`);
* writing a driver: :class:`Driver`, :class:`GenerationRequest`,
  :func:`clamp_max_tokens`, :func:`fit_prompt`, :class:`Capabilities`, :func:`check_request`,
  :class:`ModelEntry`, :class:`ConfigError`, the events a generation yields
  (:class:`Started` ... :class:`Finished`), the errors that become the
  Anthropic error envelope (:class:`MissiveError` and its subclasses), the
  conversation a request renders to (:class:`Conversation`, :class:`Turn`, the
  content blocks), images (:class:`ImageInput`, :func:`upright`, ...);
* in-process drivers (llama.cpp, MLX): :class:`LocalDriver` and the runner
  protocol it drives (:class:`Runner`, :class:`Batched`,
  :class:`ContextStates`, :class:`SharedPool` and their value types),
  :func:`common_prefix`, :func:`default_cache_bytes`, a model's default
  sampling (:func:`model_sampling`, :func:`gguf_names`,
  :func:`folder_sampling`, :class:`SamplingDefaults`);
* remote drivers: :class:`RemoteTransport` (HTTP to replicas with the shared
  failover and timeout policy), :class:`RemoteStream`, :class:`Failover`,
  :data:`Classify`, :class:`ReplicaPool`, :class:`Replica`; the replica
  policies: :class:`ReplicaRouting` (the settings), :func:`policy_for`,
  :class:`RouteKey` (what a request is routed by);
* front doors (another HTTP API on the same app: OpenAI's...):
  :class:`FrontDoorSpec`, :class:`Gateway` (what its factory gets: keys,
  the body, the answer and its events, errors), :class:`ModelListing`;
* tool calls and reasoning in generated text: :class:`ToolParser` and its
  events, :func:`build_parser`, :class:`ReasoningParser`, the template helpers;
* state kept between runs: :func:`state_dir`, :func:`read_json`, :func:`write_json`.

Importing this module imports those core modules (about 0.3 s, less than the
app itself); a plugin's hook module may import it at the top.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ConfigError, ModelEntry
from .config.state_dir import read_json, state_dir, write_json
from .driver.capabilities import Capabilities, ToolChoiceMode
from .driver.conversation import Conversation, Turn
from .driver.events import (
    Finished,
    GenerationEvent,
    Started,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from .driver.interface import Driver, GenerationRequest, clamp_max_tokens, fit_prompt
from .driver.media import DocumentProcessor, ImageInput, ImageProcessor, ImageTarget, Section, SourceBytes
from .driver.parsing import (
    CallArgs,
    CallEnd,
    CallStart,
    MalformedToolCall,
    ParseEvent,
    Reasoning,
    ReasoningEvent,
    ReasoningParser,
    ReasoningParserSpec,
    Text,
    ToolParser,
    ToolParserSpec,
)
from .driver.tools import ToolChoice, ToolDefinition
from .engine.host_cache import common_prefix, default_cache_bytes
from .engine.local import LocalDriver
from .engine.runner import (
    PENDING,
    Batched,
    Cancelled,
    ContextStates,
    Detokenizer,
    ImageMarks,
    ModelInfo,
    Pending,
    Prompt,
    Runner,
    Sampling,
    SavedContext,
    Sequence,
    SharedPool,
    Speculative,
    StepResult,
)
from .kernel.compat import API_VERSION
from .kernel.hookspecs import hookimpl
from .kernel.specs import (
    DefaultModel,
    DocumentProcessorSpec,
    DriverSpec,
    FrontDoorSpec,
    ImageProcessorSpec,
    SearchProviderSpec,
    TokenizerSpec,
    load_object,
)
from .keys.ring import ConflictingKeys, MissingKey, UnknownKey
from .media.images import rgb_image, to_8bit, upright
from .media.tokens import conversation_image_tokens, estimate_image_tokens
from .messages.capabilities import check_request
from .models.sources.gguf import GGUFError, read_tensors
from .protocol.errors import (
    ApiError,
    AuthenticationError,
    BadGatewayError,
    CapabilityError,
    InvalidRequestError,
    MediaError,
    MissiveError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    PromptTooLongError,
    RateLimitError,
    TimeoutError_,
)
from .protocol.fastjson import dumps as json_dumps
from .protocol.fastjson import loads as json_loads
from .protocol.schema.blocks import SearchResultBlock, TextBlock, ToolResultBlock, ToolUseBlock
from .reasoning.base import TagReasoningParser
from .reasoning.registry import reasoning_parser_class
from .remote.replicas import Replica, ReplicaPool
from .remote.transport import Answer, Classify, Failover, RemoteStream, RemoteTransport, sse_done
from .routing.policy import ReplicaRouting, policy_for
from .routing.prefix import RouteKey
from .sampling import SamplingDefaults, folder_sampling, gguf_names, model_sampling
from .tools.lark_grammar import json_schema_lark, object_schema, tool_call_lark
from .tools.parsers.raw_values import RawValueLanguage
from .tools.parsers.registry import build_parser, parser_class
from .tools.parsers.selection import parser_for_template
from .tools.parsers.values import allows_string
from .tools.render import hermes_messages, template_supports_tools
from .tools.search import SearchError, SearchProvider, SearchQuery, SearchResult

if TYPE_CHECKING:
    from .server.front_door import Gateway, ModelListing

#: Names imported on first use: they bring in the HTTP shell, which a
#: plugin's hook module (``missive plugins``) does not need.
_LAZY = {"Gateway": ".server.front_door", "ModelListing": ".server.front_door"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "API_VERSION",
    # declaring a plugin
    "hookimpl",
    "load_object",
    "DriverSpec",
    "DefaultModel",
    "ToolParserSpec",
    "ReasoningParserSpec",
    "TokenizerSpec",
    "ImageProcessorSpec",
    "DocumentProcessorSpec",
    "SearchProviderSpec",
    "FrontDoorSpec",
    # front doors (other HTTP APIs on the same app)
    "Gateway",
    "ModelListing",
    # search providers (the web_search server tool)
    "SearchProvider",
    "SearchQuery",
    "SearchResult",
    "SearchError",
    # drivers
    "Driver",
    "GenerationRequest",
    "clamp_max_tokens",
    "fit_prompt",
    "Capabilities",
    "ToolChoiceMode",
    "check_request",
    "ModelEntry",
    "ConfigError",
    "GenerationEvent",
    "Started",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallStart",
    "ToolCallDelta",
    "ToolCallEnd",
    "Finished",
    "StopReason",
    "MissiveError",
    "InvalidRequestError",
    "CapabilityError",
    "MediaError",
    "AuthenticationError",
    "MissingKey",
    "UnknownKey",
    "ConflictingKeys",
    "PermissionDeniedError",
    "NotFoundError",
    "RateLimitError",
    "ApiError",
    "BadGatewayError",
    "TimeoutError_",
    "OverloadedError",
    "PromptTooLongError",
    "Conversation",
    "Turn",
    "TextBlock",
    "SearchResultBlock",
    "ToolUseBlock",
    "ToolResultBlock",
    "ToolDefinition",
    "ToolChoice",
    # images and documents
    "ImageInput",
    "ImageTarget",
    "SourceBytes",
    "Section",
    "ImageProcessor",
    "DocumentProcessor",
    "upright",
    "rgb_image",
    "to_8bit",
    "conversation_image_tokens",
    "estimate_image_tokens",
    # in-process drivers
    "LocalDriver",
    "Runner",
    "Batched",
    "ContextStates",
    "Detokenizer",
    "PENDING",
    "Pending",
    "Cancelled",
    "ImageMarks",
    "ModelInfo",
    "Prompt",
    "Sampling",
    "SavedContext",
    "Sequence",
    "SharedPool",
    "Speculative",
    "StepResult",
    "common_prefix",
    "default_cache_bytes",
    "SamplingDefaults",
    "model_sampling",
    "gguf_names",
    "GGUFError",
    "read_tensors",
    "folder_sampling",
    # remote drivers
    "Replica",
    "ReplicaPool",
    "RemoteTransport",
    "RemoteStream",
    "Failover",
    "Classify",
    "Answer",
    "sse_done",
    "ReplicaRouting",
    "RouteKey",
    "policy_for",
    "json_loads",
    "json_dumps",
    # tool calls and reasoning in generated text
    "ToolParser",
    "ParseEvent",
    "Text",
    "CallStart",
    "CallArgs",
    "CallEnd",
    "Reasoning",
    "MalformedToolCall",
    "build_parser",
    "parser_class",
    "parser_for_template",
    "tool_call_lark",
    "json_schema_lark",
    "object_schema",
    "RawValueLanguage",
    "hermes_messages",
    "template_supports_tools",
    "allows_string",
    "ReasoningParser",
    "TagReasoningParser",
    "ReasoningEvent",
    "reasoning_parser_class",
    # state kept between runs
    "state_dir",
    "read_json",
    "write_json",
]
