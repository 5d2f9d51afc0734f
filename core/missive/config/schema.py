"""The configuration's schema: one strict pydantic model per section
(``[server]``, ``[models.ID]``, ``[thinking]``, ``[media]``...) and
:class:`Config`, the whole file (the shape is in :mod:`missive.config`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from ..protocol.capabilities import CAPABILITY_KEYS, unknown_keys
from .keys import KeyEntry, UsageConfig, check_key_name, hash_key
from .routing import RoutingConfig

__all__ = [
    "ServerConfig",
    "ModelEntry",
    "AliasThinking",
    "PluginsConfig",
    "ThinkingConfig",
    "MediaConfig",
    "BatchesConfig",
    "ThreadsConfig",
    "KeyEntry",
    "UsageConfig",
    "Config",
    "ServerToolsConfig",
    "RoutingConfig",
    "ConfigError",
    "LOOPBACK_HOSTS",
    "MiB",
]

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class ConfigError(Exception):
    """Configuration that cannot be used; the message says which key and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Strict):
    """``[server]``. Every key is described in docs/configuration.md.

    ``queue_depth`` and ``queue_timeout`` are the defaults of the models' own
    keys (see :class:`ModelEntry` and :mod:`missive.serving.admission`).
    ``shutdown_grace`` is how long ``missive serve`` lets running generations
    finish after SIGTERM or SIGINT (:mod:`missive.server.shutdown`).
    ``memory_budget_mib``: MiB the loaded models may take together (each
    model's ``memory_mib``, else its files' size); loading one beyond it
    first unloads the least recently used idle others
    (:mod:`missive.models.residency`). None: no budget.
    ``default_model`` picks which plugin-offered default model is served when
    no model is configured (:mod:`missive.models.defaults`).
    ``workers``: processes ``missive serve`` runs, sharing the listening
    socket; above 1 only for configurations whose models all run remotely
    (:mod:`missive.server.workers`).
    ``console``: serve the web console at ``/console`` (:mod:`missive.console`).
    ``tracing``: OpenTelemetry spans of the API's requests, continuing the
    client's ``traceparent`` (:mod:`missive.serving.tracing`; needs the
    ``otel`` extra).
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8642, ge=0, le=65535)
    api_keys: list[str] = Field(default_factory=list)
    allow_unauthenticated_remote: StrictBool = False
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    strict: StrictBool = False
    ping_interval: float = Field(default=5.0, gt=0)
    delta_interval: float = Field(default=0.015, ge=0)
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    log_format: Literal["text", "json"] = "text"
    metrics_public: StrictBool = False
    console: StrictBool = True
    capture_dir: str | None = None
    queue_depth: int = Field(default=16, ge=0)
    queue_timeout: float = Field(default=300.0, gt=0)
    shutdown_grace: float = Field(default=30.0, ge=0, le=86400, allow_inf_nan=False, strict=True)
    memory_budget_mib: int | None = Field(default=None, ge=1)
    default_model: str | None = None
    workers: int = Field(default=1, ge=1, le=256)
    tracing: StrictBool = False

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("api_keys")
    @classmethod
    def _no_blank_key(cls, keys: list[str]) -> list[str]:
        """An empty or blank key would count as "keys configured" (the
        loopback rule) while no client could ever send it: everyone locked out."""
        if any(not key.strip() for key in keys):
            raise ValueError("an API key is empty or blank; remove it or give a real key")
        return keys


#: ``models.NAME.alias_thinking`` (:mod:`missive.thinking.through_alias`).
AliasThinking = Literal["drop", "refuse"]


class ModelEntry(_Strict):
    """One served model: which driver runs it, with which settings.

    Attributes:
        driver: a registered driver name (``missive plugins`` lists them).
        display_name: shown by ``GET /v1/models``; defaults to the id.
        context_window: tokens of context (prompt + output); the driver may
            read it from the model when unset.
        max_output_tokens: cap on ``max_tokens`` (reported as ``max_tokens``
            in the models listing).
        aliases: glob patterns (``fnmatch``) of client model ids served by this model.
        created_at: RFC 3339 time shown by ``GET /v1/models``.
        queue_depth: requests that may wait for this model when all its
            ``max_concurrency`` slots are busy (None: ``server.queue_depth``).
        queue_timeout: seconds a request may wait for a slot (None:
            ``server.queue_timeout``). Beyond either: 529 ``overloaded_error``.
        lazy: load the model on its first request instead of at start-up
            (it is listed, and counts as ready, before).
        idle_unload: seconds without a request after which the model is
            unloaded (loaded again by the next request); None: never.
        memory_mib: MiB the model takes, for ``server.memory_budget_mib``;
            None: the size of its files (weights and projector; a remote
            model's: 0).
        settings: driver-specific settings, validated by the driver.
        fallbacks: the model's default fallback chain, used for a request's
            ``fallbacks: "default"``, and for every request that names no
            ``fallbacks`` with ``routing.default_fallbacks``: model ids, or
            tables with the API's per-entry overrides (``{model = "x",
            max_tokens = 512}``) (:mod:`missive.routing.chain`,
            :mod:`missive.routing.fallbacks`).
        capabilities: overrides of what ``GET /v1/models`` reports in
            ``capabilities``, keyed by the API's dotted names
            (``"pdf_input" = false``, ``"thinking.types.adaptive" = true``);
            they change what clients are told, not what the model does
            (:mod:`missive.models.capabilities`).
        lifecycle, deprecated_at, retires_at: the model's ``lifecycle``
            (``active`` or ``deprecated``) and its dates in ``GET /v1/models``.
        alias_thinking: a request that names the model through one of the
            ``aliases`` (written for Claude) and asks for thinking the model
            cannot do: ``drop`` answers it without thinking and reports it,
            ``refuse`` gives the 400 a request naming the model's id gets
            (:mod:`missive.thinking.through_alias`).
    """

    driver: str
    display_name: str | None = None
    context_window: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    aliases: list[str] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc).replace(microsecond=0))
    queue_depth: int | None = Field(default=None, ge=0)
    queue_timeout: float | None = Field(default=None, gt=0)
    lazy: StrictBool = False
    idle_unload: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_mib: int | None = Field(default=None, ge=0)
    settings: dict[str, Any] = Field(default_factory=dict)
    # -- Issue 26 part B ----------------------------------------------------
    fallbacks: list[str | dict[str, Any]] = Field(default_factory=list)
    capabilities: dict[str, bool] = Field(default_factory=dict)
    lifecycle: Literal["active", "deprecated"] = "active"
    deprecated_at: datetime | None = None
    retires_at: datetime | None = None
    alias_thinking: AliasThinking = "drop"

    @field_validator("capabilities")
    @classmethod
    def _known_capabilities(cls, overrides: dict[str, bool]) -> dict[str, bool]:
        unknown = unknown_keys(overrides)
        if unknown:
            raise ValueError(
                f"unknown capability {', '.join(unknown)}; known: {', '.join(sorted(CAPABILITY_KEYS))}"
            )
        return overrides

    # -- end of issue 26 part B --------------------------------------------


class ThinkingConfig(_Strict):
    """Signing of thinking blocks (see :mod:`missive.thinking.signing`).

    Attributes:
        signing_key: secret string (16+ characters) keying the signatures;
            set it when several servers must accept each other's blocks.
        key_file: where the generated key is kept when ``signing_key`` is
            unset; default ``thinking.key`` in the state directory
            (:func:`missive.config.state_dir.state_dir`).
    """

    signing_key: str | None = Field(default=None, min_length=16)
    key_file: str | None = None


class PluginsConfig(_Strict):
    block: list[str] = Field(default_factory=list)


MiB = 1024 * 1024


class MediaConfig(_Strict):
    """``[media]``: limits and switches for image and document blocks.

    Every limit, its unit and the rule it follows is listed in docs/media.md.

    Attributes:
        fetch_urls: fetch ``url`` sources of images and documents; false turns
            every url source into a 400.
        fetch_allow: hosts URL fetching may reach although they are internal:
            hostnames (exact, or ``*.example.com`` for subdomains), IP
            addresses or CIDR networks (``10.0.0.0/8``, ``fd00::/8``).
        fetch_timeout: seconds for one fetch, redirects included.
        fetch_max_redirects: redirects followed, each one checked again.
        image_max_bytes: largest image, in bytes after base64 decoding or as fetched.
        image_max_side: largest width or height accepted, in pixels (the API's 8000).
        image_max_pixels: largest width x height decoded (decompression bombs
            are refused from the header, before decoding).
        image_max_edge: images are downscaled so their longer side is at most
            this many pixels (a model's ``image_max_edge`` capability may lower it).
        image_fallback: an image processor (by name, e.g. ``"placeholder"``)
            that turns images into text for models without image input;
            unset, such a request is a 400 naming the capability.
        document_max_bytes: largest document (PDF, office file), in bytes.
        pdf_max_pages: most pages read from one PDF (more: a 400).
        office_max_unpacked_bytes: most bytes an office file (a zip) may unpack to.
    """

    fetch_urls: StrictBool = True
    fetch_allow: list[str] = Field(default_factory=list)
    fetch_timeout: float = Field(default=10.0, gt=0)
    fetch_max_redirects: int = Field(default=5, ge=0, le=20)
    image_max_bytes: int = Field(default=10 * MiB, ge=1024)
    image_max_side: int = Field(default=8000, ge=1)
    image_max_pixels: int = Field(default=64_000_000, ge=1)
    image_max_edge: int = Field(default=1568, ge=16)
    image_fallback: str | None = None
    document_max_bytes: int = Field(default=32 * MiB, ge=1024)
    pdf_max_pages: int = Field(default=100, ge=1)
    office_max_unpacked_bytes: int = Field(default=128 * MiB, ge=1024)

    @field_validator("fetch_allow")
    @classmethod
    def _check_allow(cls, value: list[str]) -> list[str]:
        from ..media.addresses import parse_allow_list

        parse_allow_list(value)  # raises ValueError naming a bad entry
        return value


class ServerToolsConfig(_Strict):
    """``[server_tools]``: the API's server tools that Missive runs itself
    (:mod:`missive.tools.server_runner`). Off by default: unconfigured, their
    calls are answered with the API's ``unavailable`` error.

    Attributes:
        web_fetch: run ``web_fetch`` calls: the URL is fetched under the
            media fetcher's rules (``media.fetch_allow``, timeout, redirects).
        web_fetch_max_bytes: largest page or PDF read, in bytes.
        web_search: the search provider (``register_search_providers``) that
            runs ``web_search`` calls, e.g. ``"searxng"``; unset: none.
        search: the provider's settings (``[server_tools.search]``).
        max_results: most results a search returns to the model.
        mcp: run the MCP connector (a request's ``mcp_servers``,
            :mod:`missive.tools.mcp`; needs ``missive-server[mcp]``).
        mcp_servers: ``fnmatch`` globs of the MCP server URLs every key may
            use (a key's own ``mcp_servers`` replaces it); empty: none.
        mcp_timeout: seconds for one MCP tool listing or call, in all.
    """

    web_fetch: StrictBool = False
    web_fetch_max_bytes: int = Field(default=10 * MiB, ge=1024)
    web_search: str | None = None
    search: dict[str, Any] = Field(default_factory=dict)
    max_results: int = Field(default=5, ge=1, le=50)
    mcp: StrictBool = False
    mcp_servers: list[str] = Field(default_factory=list)
    mcp_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)


class BatchesConfig(_Strict):
    """``[batches]``: the Message Batches endpoints (:mod:`missive.batches`).

    Attributes:
        enabled: serve ``/v1/messages/batches`` and run batches; false: the
            endpoints answer 404 and no database is opened.
        expiry: seconds after creation a batch's unfinished requests expire
            (``expires_at``; the API's 24 hours).
        retention: seconds after creation a batch's results are kept; then
            they are deleted and the batch is ``archived_at`` (the API's 29 days).
        max_slots: how many of a model's slots batch requests may hold at
            once: a float in (0, 1] is a fraction of the slots (rounded down,
            at least 1; 1.0 is every slot), an int >= 1 a count. A model with
            no slot limit (remote backends, echo) takes a count as it is and
            a fraction as 1.
        max_requests: requests per batch (the API's 100,000).
        max_body_bytes: largest create body (the API's 256 MB); larger: 413.
        database: the SQLite file (default ``batches.sqlite3`` in the state
            directory, :func:`missive.config.state_dir.state_dir`).
    """

    enabled: StrictBool = True
    expiry: float = Field(default=86400.0, gt=0, allow_inf_nan=False)
    retention: float = Field(default=29 * 86400.0, gt=0, allow_inf_nan=False)
    max_slots: int | float = Field(default=0.5)
    max_requests: int = Field(default=100_000, ge=1)
    max_body_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    database: str | None = None

    @field_validator("max_slots")
    @classmethod
    def _check_slots(cls, value: int | float) -> int | float:
        if isinstance(value, bool):
            raise ValueError("must be a count (int >= 1) or a fraction (float in (0, 1])")
        if isinstance(value, int):
            if value < 1:
                raise ValueError("a count of slots must be at least 1")
        elif not 0 < value <= 1:
            raise ValueError("a fraction of the slots must be in (0, 1]; write a count as an int")
        return value

    def slots_for(self, limit: int | None) -> int:
        """The most slots batch requests may hold on a model with ``limit``
        slots (None: no limit), from :attr:`max_slots`."""
        value = self.max_slots
        if isinstance(value, int):
            return value if limit is None else max(1, min(value, limit))
        if limit is None:
            return 1
        return max(1, int(value * limit))


class ThreadsConfig(_Strict):
    """``[threads]``: what the server keeps of its responses for message
    threads and cache diagnostics (:mod:`missive.threads`).

    Attributes:
        enabled: hold threads (``thread`` in a request); false: such a
            request is a 400 ``thread_unsupported_request``, which the SDKs'
            tool runners answer by sending the whole conversation.
        ttl: seconds a thread is kept after the response it ends with (the
            API's 5 minutes; a continue restarts it with its new response).
        diagnostics_ttl: seconds the fingerprint of a request that asked for
            ``diagnostics`` is kept.
        max_count: responses kept at once, threads and fingerprints together;
            beyond it the oldest are dropped.
        max_bytes: bytes of kept conversations (their JSON) at once; beyond
            it the oldest are dropped. A thread larger than this is not kept.
    """

    enabled: StrictBool = True
    ttl: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    diagnostics_ttl: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    max_count: int = Field(default=1024, ge=1)
    max_bytes: int = Field(default=256 * MiB, ge=1024)


class Config(_Strict):
    """The whole configuration. ``source``: the file it was read from (None:
    no file, only defaults, environment and overrides); not a key."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    models: dict[str, ModelEntry] = Field(default_factory=dict)
    plugins: PluginsConfig = Field(default_factory=PluginsConfig)
    thinking: ThinkingConfig = Field(default_factory=ThinkingConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    server_tools: ServerToolsConfig = Field(default_factory=ServerToolsConfig)
    batches: BatchesConfig = Field(default_factory=BatchesConfig)
    threads: ThreadsConfig = Field(default_factory=ThreadsConfig)
    keys: dict[str, KeyEntry] = Field(default_factory=dict)
    usage: UsageConfig = Field(default_factory=UsageConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    source: str | None = Field(default=None, exclude=True)

    @field_validator("keys")
    @classmethod
    def _key_names(cls, keys: dict[str, KeyEntry]) -> dict[str, KeyEntry]:
        for name in keys:
            check_key_name(name)
        return keys

    @model_validator(mode="after")
    def _one_name_per_key(self) -> Config:
        """Two names for one key would make its owner ambiguous: refused."""
        seen: dict[str, str] = {}
        named = [(f"keys.{name}", entry.key_sha256) for name, entry in self.keys.items()]
        plain = [(f"server.api_keys[{i}]", hash_key(key)) for i, key in enumerate(self.server.api_keys)]
        for where, digest in named + plain:
            if digest in seen:
                raise ValueError(f"{where} is the same key as {seen[digest]}; a key has one name")
            seen[digest] = where
        return self

    @property
    def has_keys(self) -> bool:
        """Some API key is configured (``server.api_keys`` or ``[keys.NAME]``):
        requests must present one."""
        return bool(self.server.api_keys or self.keys)

    def check_bind(self) -> None:
        """Refuse to listen beyond loopback without API keys, unless allowed.

        Raises:
            ConfigError: host is not loopback, no keys, no explicit permission.
        """
        s = self.server
        if s.host not in LOOPBACK_HOSTS and not self.has_keys and not s.allow_unauthenticated_remote:
            raise ConfigError(
                f"refusing to listen on {s.host} without API keys: add [keys.NAME] tables (missive keys new "
                "NAME) or set server.api_keys (or MISSIVE_API_KEY), or pass --allow-unauthenticated-remote"
            )
