"""The plugin kernel: discovery, isolated loading and the registries built from hooks.

Plugins come from three places, in order:

1. default plugins shipped in :mod:`missive.default_plugins` (built-in behaviour
   registered like any plugin, as pytest and datasette do);
2. entry points in the ``missive`` group (``[project.entry-points.missive]``),
   the key being the distribution name (``missive-llamacpp = "missive_llamacpp"``);
3. modules named in ``$MISSIVE_PLUGINS`` (comma separated), for local
   development and tests.

Each plugin is imported, registered and validated inside its own ``try``: a
plugin that fails to import, was built for another plugin API version
(:mod:`missive.kernel.compat`), implements an unknown hook, or raises from a
registration hook is recorded in :attr:`Kernel.plugins` with its error and
unregistered; the others load. ``$MISSIVE_BLOCK_PLUGINS`` (or
``plugins.block`` in the config) names entry points not to load.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

import pluggy

from ..driver.parsing import ReasoningParserSpec, ToolParserSpec
from . import hookspecs
from .compat import API_VERSION, api_mismatch, declared_versions, import_failure
from .specs import (
    DefaultModel,
    DocumentProcessorSpec,
    DriverSpec,
    FrontDoorSpec,
    ImageProcessorSpec,
    SearchProviderSpec,
    TokenizerSpec,
)

__all__ = ["Kernel", "PluginInfo", "DEFAULT_PLUGINS", "ENTRY_POINT_GROUP"]

log = logging.getLogger("missive.kernel")

ENTRY_POINT_GROUP = "missive"
DEFAULT_PLUGINS = (
    "missive.default_plugins.aliases",
    "missive.default_plugins.tool_parsers",
    "missive.default_plugins.reasoning_parsers",
    "missive.default_plugins.media",
    "missive.default_plugins.searxng",
)

T = TypeVar("T")


@dataclass
class PluginInfo:
    """What ``missive plugins`` shows for one plugin."""

    name: str
    source: str  # "default", "entry point", "MISSIVE_PLUGINS"
    module: str
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    error: str | None = None
    #: The plugin API versions it declares (``MISSIVE_API``); None for the
    #: default plugins and for one that could not be imported.
    api: tuple[str, ...] | None = None


_REPORTED: set[tuple[str, str]] = set()


def _report_unloaded(name: str, why: str) -> None:
    """Log that plugin ``name`` was not loaded, once per process: the CLI
    builds more than one :class:`Kernel` (one for its commands, one for the
    command run), and each would log the same failure. ``Kernel.plugins``
    still records it every time."""
    if (name, why) not in _REPORTED:
        _REPORTED.add((name, why))
        log.error("plugin %s not loaded: %s", name, why)


class Kernel:
    """A pluggy manager plus the registries collected from registration hooks."""

    def __init__(self, *, block: Iterable[str] = (), load_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self._block = set(block) | {
            b.strip() for b in os.environ.get("MISSIVE_BLOCK_PLUGINS", "").split(",") if b.strip()
        }
        #: Installed plugins left out by ``plugins.block`` or
        #: ``MISSIVE_BLOCK_PLUGINS`` (entry-point names, in load order).
        self.blocked: list[str] = []
        for module_name in DEFAULT_PLUGINS:
            self._load(module_name, "default", functools.partial(importlib.import_module, module_name))
        if load_entry_points:
            for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                if ep.name in self._block:
                    log.info("plugin %s blocked by configuration", ep.name)
                    self.blocked.append(ep.name)
                    continue
                version = ep.dist.version if ep.dist is not None else None
                self._load(ep.name, "entry point", ep.load, module=ep.value, version=version)
        for module_name in os.environ.get("MISSIVE_PLUGINS", "").split(","):
            module_name = module_name.strip()
            if module_name:
                self._load(
                    module_name, "MISSIVE_PLUGINS", functools.partial(importlib.import_module, module_name)
                )
        self.drivers: dict[str, DriverSpec] = self._collect("register_drivers", DriverSpec)
        self.default_models: dict[str, DefaultModel] = self._collect(
            "register_default_models", DefaultModel, key="id"
        )
        self.tool_parsers = self._collect("register_tool_parsers", ToolParserSpec)
        self.reasoning_parsers = self._collect("register_reasoning_parsers", ReasoningParserSpec)
        self.tokenizers = self._collect("register_tokenizers", TokenizerSpec)
        self.image_processors = self._collect("register_image_processors", ImageProcessorSpec)
        self.document_processors = self._collect("register_document_processors", DocumentProcessorSpec)
        self.search_providers = self._collect("register_search_providers", SearchProviderSpec)
        self.front_doors = self._collect("register_front_doors", FrontDoorSpec)

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def _info(self, plugin: object) -> PluginInfo | None:
        name = self.pm.get_name(plugin)
        return next((p for p in self.plugins if p.name == name), None)

    def _load(
        self,
        name: str,
        source: str,
        loader: Callable[[], Any],
        *,
        module: str | None = None,
        version: str | None = None,
    ) -> None:
        info = PluginInfo(name=name, source=source, module=module or name, version=version)
        self.plugins.append(info)
        if self.pm.has_plugin(name):
            info.error = "a plugin of this name is already loaded"
            _report_unloaded(name, info.error)
            return
        try:
            plugin = loader()
        except Exception as exc:  # a broken or outdated plugin is reported, never fatal
            if source == "default":
                info.error = f"{type(exc).__name__}: {exc}"
            else:
                info.error = import_failure(name, version, exc, API_VERSION)
            _report_unloaded(name, info.error)
            return
        try:
            if isinstance(plugin, ModuleType):
                info.module = plugin.__name__
            if source != "default":
                info.api = declared_versions(plugin)
                mismatch = api_mismatch(name, version, info.api, API_VERSION)
                if mismatch is not None:
                    info.error = mismatch
                    _report_unloaded(name, mismatch)
                    return
            unknown = [
                attr
                for attr in dir(plugin)
                if self.pm.parse_hookimpl_opts(plugin, attr) is not None and not hasattr(self.pm.hook, attr)
            ]
            if unknown:
                raise pluggy.PluginValidationError(plugin, f"unknown hook(s): {', '.join(unknown)}")
            self.pm.register(plugin, name=name)
            info.hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])
        except Exception as exc:  # one broken plugin is reported, never fatal
            info.error = f"{type(exc).__name__}: {exc}"
            _report_unloaded(name, info.error)

    def _collect(self, hook_name: str, kind: type[T], key: str = "name") -> dict[str, T]:
        """Call each implementation of a registration hook on its own.

        A plugin whose hook raises or returns something other than a list of
        ``kind`` is marked failed and unregistered. Installed plugins come
        before the default plugins, so a plugin can replace built-in behaviour
        (a tool parser of the same name) and its template markers are tried
        first; among them the first registration of a name wins, a later
        duplicate is logged, except that a default model of a higher
        ``priority`` replaces one of the same id.
        """
        found: dict[str, T] = {}
        caller = getattr(self.pm.hook, hook_name)
        defaults = {name for name in DEFAULT_PLUGINS}
        impls = sorted(caller.get_hookimpls(), key=lambda impl: impl.plugin_name in defaults)  # stable
        for impl in impls:
            try:
                result = impl.function()
                items = list(result or [])
                bad = [item for item in items if not isinstance(item, kind)]
                if bad:
                    raise TypeError(f"{hook_name} returned {bad[0]!r}, expected {kind.__name__}")
            except Exception as exc:
                info = self._info(impl.plugin)
                if info is not None:
                    info.error = f"{hook_name}: {type(exc).__name__}: {exc}"
                log.error("plugin %s failed in %s: %s", impl.plugin_name, hook_name, exc)
                self.pm.unregister(impl.plugin)
                continue
            for item in items:
                item_key = getattr(item, key)
                if item_key in found:
                    # A default model of the same id and a higher priority replaces
                    # the other (a distribution's tuned entry over the driver's).
                    if getattr(item, "priority", 0) > getattr(found[item_key], "priority", 0):
                        log.info(
                            "%s %r from %s replaces one of lower priority",
                            kind.__name__,
                            item_key,
                            impl.plugin_name,
                        )
                        found[item_key] = item
                        continue
                    log.warning(
                        "%s %r from %s ignored: already registered", kind.__name__, item_key, impl.plugin_name
                    )
                    continue
                found[item_key] = item
        return found
