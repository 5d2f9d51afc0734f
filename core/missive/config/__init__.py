"""Configuration: a TOML file, then environment variables, then CLI overrides.

Shape (every key optional)::

    [server]
    host = "127.0.0.1"          # listen address
    port = 8642
    api_keys = ["sk-local-1"]   # also MISSIVE_API_KEY="k1,k2"
    allow_unauthenticated_remote = false
    max_body_bytes = 33554432   # 32 MiB, the API's own limit; over it: 413
    strict = false              # reject unknown fields instead of reporting them
    ping_interval = 5.0         # seconds of model silence before an SSE ping
    delta_interval = 0.015      # seconds between streamed deltas; faster ones are merged
    log_level = "info"
    log_format = "text"         # or "json": one JSON object per line
    metrics_public = false      # true: GET /metrics needs no API key
    capture_dir = "/tmp/missive-captures"   # debugging/tests: write every request (keys redacted)
    queue_depth = 16            # requests that may wait per model when every slot is busy
    queue_timeout = 300.0       # seconds one may wait for a slot; then 529 overloaded_error
    shutdown_grace = 30.0       # on SIGTERM/SIGINT: seconds running generations may take to finish
    memory_budget_mib = 16384   # models loaded at once fit in it: loading one unloads idle others (LRU)
    default_model = "smollm2-135m"   # with no [models]: which plugin-offered default is served
    workers = 1                 # processes sharing the port (remote-only models; missive.server.workers)

    [models.smollm2-135m]
    driver = "llamacpp"
    display_name = "SmolLM2 135M Instruct"
    context_window = 8192
    aliases = ["claude-*"]      # glob patterns of client model ids
    queue_depth = 4             # overrides server.queue_depth for this model (also queue_timeout)
    lazy = true                 # load on the first request, not at start-up
    idle_unload = 300.0         # unload after this many seconds without requests
    memory_mib = 900            # what it takes, for memory_budget_mib (default: its files' size)
    [models.smollm2-135m.settings]
    model_path = "/path/to/model.gguf"

    [plugins]
    block = ["some-plugin"]     # entry point names not to load

    [thinking]
    signing_key = "..."         # secret for thinking-block signatures (16+ chars)
    key_file = "~/.local/state/missive/thinking.key"   # used when signing_key is unset (created)

    [batches]                   # message batches (docs/operations.md#message-batches)
    enabled = true
    expiry = 86400.0            # seconds before a batch's unfinished requests expire (the API's 24 h)
    retention = 2505600.0       # seconds after creation its results are kept (the API's 29 days)
    max_slots = 0.5             # slots of a model batches may hold: a fraction (float) or a count (int)
    max_requests = 100000       # requests per batch (the API's limit)
    max_body_bytes = 268435456  # 256 MiB, the API's limit on a batch's body
    database = "~/.local/state/missive/batches.sqlite3"   # default: in the state directory

    [server_tools]              # web_fetch and web_search run by the server (docs/tools.md#server-tools)
    web_fetch = true            # fetch pages for the model (media.fetch_allow rules); default false
    web_search = "searxng"      # the search provider that runs web_search; unset: "unavailable"
    [server_tools.search]       # that provider's settings
    url = "http://127.0.0.1:8888"

    [threads]                   # message threads and cache diagnostics (docs/configuration.md#threads)
    enabled = true              # false: a request with `thread` gets 400 thread_unsupported_request
    ttl = 300.0                 # seconds a thread is kept after its last response (the API's 5 minutes)
    diagnostics_ttl = 3600.0    # seconds a cache diagnostics fingerprint is kept
    max_count = 1024            # responses kept at once (threads and fingerprints); the oldest go first
    max_bytes = 268435456       # 256 MiB of kept conversations; the oldest go first

    [keys.alice]                # a named key (docs/configuration.md#keysname): missive keys new alice
    key_sha256 = "..."          # the key's SHA-256: the file holds no secret
    scope = "user"              # or "admin": all batches, /v1/status, /metrics, /v1/usage
    models = ["qwen3-*"]        # configured model ids or globs it may use (default: all)
    requests_per_minute = 60    # also input/output_tokens_per_minute/_per_day, concurrent_requests
    cache_scope = "team-a"      # prompt-cache scope shared with keys naming it (default: its own)

    [usage]                     # usage per key and model (GET /v1/usage, missive usage)
    retention = 7776000.0       # seconds kept (90 days)

    [routing]
    default_fallbacks = true    # requests naming no `fallbacks` get their model's (models.NAME.fallbacks)
    [[routing.rules]]           # routing by need (docs/deployment.md#routing-by-need)
    name = "vision"
    images = true               # or model = ["claude-haiku-*"], min_prompt_tokens = 32000, thinking = true
    to = "qwen2.5-vl"

    [media]                     # image and document blocks (docs/media.md)
    fetch_urls = true           # fetch url sources (false: a 400 for them)
    fetch_allow = ["10.1.2.0/24", "intranet.example"]   # internal hosts allowed anyway
    image_fallback = "placeholder"   # images for text-only models become a note

Overrides: any key as ``MISSIVE__SECTION__KEY=value`` in the environment
(``MISSIVE__SERVER__PORT=9000``, ``MISSIVE__MODELS__MYMODEL__CONTEXT_WINDOW=4096``)
or ``--set section.key=value`` on the CLI (quote dotted names:
``--set 'models."qwen2.5".context_window=4096'``).  Values parse as TOML
values when they can (``9000``, ``true``, ``["a","b"]``), else as strings.
Precedence: file < environment < CLI.

The file: ``--config FILE``, else ``$MISSIVE_CONFIG``, else the first that
exists of ``$XDG_CONFIG_HOME/missive/missive.toml`` (``~/.config/...`` when
unset) and ``/etc/missive/missive.toml`` (:func:`config_search_path`; only
with ``search=True``, as the command line and :mod:`missive.asgi` do), else
none: the defaults.
"""

from .loading import SYSTEM_CONFIG, config_search_path, find_config, load_config
from .overrides import ENV_PREFIX, env_overrides, parse_value, set_path, split_key
from .schema import (
    LOOPBACK_HOSTS,
    BatchesConfig,
    Config,
    ConfigError,
    KeyEntry,
    MediaConfig,
    MiB,
    ModelEntry,
    PluginsConfig,
    RoutingConfig,
    ServerConfig,
    ServerToolsConfig,
    ThinkingConfig,
    ThreadsConfig,
    UsageConfig,
)

__all__ = [
    "ServerConfig",
    "ModelEntry",
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
    "load_config",
    "ConfigError",
    "config_search_path",
    "find_config",
    "SYSTEM_CONFIG",
    "LOOPBACK_HOSTS",
    "MiB",
    "ENV_PREFIX",
    "env_overrides",
    "parse_value",
    "set_path",
    "split_key",
]
