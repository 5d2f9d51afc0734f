"""Typed registration objects returned by the ``register_*`` hooks.

Factories are lazy ``"module:attribute"`` strings, so listing plugins and their
capabilities (``missive plugins``) never imports llama_cpp, mlx or torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..config import ModelEntry
from ..driver.capabilities import Capabilities
from ..driver.parsing import ReasoningParserSpec, ToolParserSpec

__all__ = [
    "load_object",
    "load_registered",
    "DriverSpec",
    "DefaultModel",
    "ToolParserSpec",
    "ReasoningParserSpec",
    "TokenizerSpec",
    "ImageProcessorSpec",
    "DocumentProcessorSpec",
    "SearchProviderSpec",
    "FrontDoorSpec",
]


def load_object(ref: str) -> Any:
    """Import ``"package.module:attr"`` and return the attribute.

    Raises:
        ImportError: the module is missing; the message names the reference.
        AttributeError: the module lacks the attribute.
    """
    module_name, _, attr = ref.partition(":")
    if not attr:
        raise ValueError(f"factory reference {ref!r} must look like 'module:attribute'")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_registered(specs: Any, name: str, base: type, kind: str) -> Any:
    """The class that ``specs`` (a mapping of registered specs by name)
    registers as ``name``, checked to be a subclass of ``base``.

    ``kind`` names the registry in messages (``"tool parser"``).

    Raises:
        ApiError: no plugin registers ``name`` (a server configuration
            problem, e.g. a setting naming an absent plugin), or the factory
            is not a ``base`` subclass.
    """
    from ..protocol.errors import ApiError

    spec = specs.get(name)
    if spec is None:
        known = ", ".join(sorted(specs)) or "none"
        raise ApiError(f"{kind} '{name}' is not registered (registered: {known})")
    cls = load_object(spec.factory)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ApiError(f"{kind} '{name}' ({spec.factory}) is not a {base.__name__} subclass")
    return cls


@dataclass(frozen=True)
class DriverSpec:
    """A backend driver.

    Attributes:
        name: what ``driver = "..."`` in a model entry refers to.
        factory: ``"module:attr"`` of a :class:`~missive.driver.interface.Driver` subclass, built as
            ``cls(model_id: str, entry: ModelEntry, capabilities: Capabilities)``.
        capabilities: what the driver can do for any model (a driver instance
            may narrow or widen it per model through ``Driver.capabilities``).
        description: one line for listings.
        extra: the pip extra that installs the driver's dependencies, for error messages.
        model_format: ``"gguf"`` or ``"mlx"`` for a driver that loads model
            files itself: its ``model_setting`` then also takes a model
            reference (``hf://...``, an Ollama name), resolved to local files
            before the driver is built (:mod:`missive.models.sources`), and
            ``missive serve --model`` picks it for models of that format.
            None: the driver loads no files (a remote backend).
        model_setting: the settings key holding the model's path.
        projector_setting: the settings key of a vision projector file, set
            from the reference when its repository (or Ollama model) has one
            and the entry does not set it; None: the driver takes none.
    """

    name: str
    factory: str
    capabilities: Capabilities
    description: str = ""
    extra: str | None = None
    model_format: str | None = None
    model_setting: str = "model_path"
    projector_setting: str | None = None


@dataclass(frozen=True)
class DefaultModel:
    """A model served when the configuration names none (the embedded default).

    Attributes:
        id: the model id it is served as.
        entry: its configuration, as a ``[models.<id>]`` table would give it.
        priority: when several plugins offer one, the highest priority is
            served (ties: the smallest id); ``server.default_model`` overrides
            (:mod:`missive.models.defaults`). ``0`` for a generic default (the
            embedded SmolLM2); a distribution for specific hardware that
            should win over it uses a higher value, e.g. ``10``.
    """

    id: str
    entry: ModelEntry
    priority: int = 0


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer usable for counting tokens of models whose driver cannot."""

    name: str
    factory: str
    description: str = ""


@dataclass(frozen=True)
class ImageProcessorSpec:
    """Turns image blocks of the given media types into what drivers accept.

    ``factory`` names a :class:`~missive.driver.media.ImageProcessor` subclass,
    built once as ``cls(config.media)``; its ``process(image, target)``
    returns an :class:`~missive.driver.media.ImageInput` or text (a fallback).
    """

    name: str
    factory: str
    media_types: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True)
class DocumentProcessorSpec:
    """Turns document blocks of the given media types into text.

    ``factory`` names a :class:`~missive.driver.media.DocumentProcessor`
    subclass, built once as ``cls(config.media)``; its ``process(document)``
    returns :class:`~missive.driver.media.Section` objects (pages, sheets...).
    """

    name: str
    factory: str
    media_types: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True)
class SearchProviderSpec:
    """A search engine that runs the ``web_search`` server tool.

    ``factory`` names a :class:`~missive.tools.search.SearchProvider`
    subclass, built once as ``cls(settings)`` with the
    ``[server_tools.search]`` table when ``server_tools.web_search`` names
    this provider; its ``search(query)`` returns
    :class:`~missive.tools.search.SearchResult` objects.
    """

    name: str
    factory: str
    description: str = ""


@dataclass(frozen=True)
class FrontDoorSpec:
    """Another HTTP API served on the same app as the Messages API (OpenAI's
    Chat Completions...), on the same models, keys and limits.

    ``factory`` names a callable built once per app as
    ``factory(gateway)`` with the app's :class:`~missive.server.front_door.Gateway`
    (the serving object: keys, body, the answer, its events, errors), returning
    a ``quart.Blueprint`` whose rules are relative to ``/v1``; the core mounts
    it under ``/v1`` (and ``/v1/v1``). Its views render their own wire format
    and error envelope; the Messages API's own paths stay the core's.
    """

    name: str
    factory: str
    description: str = ""
