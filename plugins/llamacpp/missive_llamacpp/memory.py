"""Fit a model's KV cache to the machine: what llama.cpp reports, what is free, what fits.

Three parts:

* **llama.cpp's own report** (:class:`LogCapture`, :func:`parse_report`):
  llama.cpp logs every cache it allocates, one line each
  (``llama_kv_cache: size = 720.00 MiB ( 32768 cells, 30 layers, 4/1
  seqs), K (f16): ...``; ``llama_memory_recurrent: size = ...`` for the
  recurrent state of Mamba-style layers) and its compute buffers
  (``CPU compute buffer size = 98.25 MiB``), and says whether ``auto``
  turned flash attention on (``Flash Attention enabled``). These lines are
  the only place the per-layer layout of a hybrid or sliding-window model
  is summed up, so the runner reads them from a small probe context
  (:func:`per_token_costs`) and from the real one (the load log line);
* **free memory** (:func:`free_memory`): ``MemAvailable`` of
  ``/proc/meminfo`` bounded by the cgroup's ``memory.max`` (containers), or
  the free memory of the GPUs llama.cpp sees (``ggml_backend_dev_memory``);
  :func:`budget` is the same arithmetic on given figures (``scripts/recipes``);
* **the arithmetic** (:func:`fit`): with ``context_window``, ``parallel``
  and ``kv_pool_tokens`` on auto, the largest values up to the trained
  context, 4 slots and ``parallel x window`` cells that fit the free
  memory less :func:`margin_bytes`; a window that cannot fit even one
  conversation is a :class:`~missive.api.ConfigError` naming the memory it
  needs. Every step is written into :attr:`Fit.arithmetic` for the log.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp

from missive.api import ConfigError

log = logging.getLogger("missive.llamacpp")

__all__ = [
    "Costs",
    "Fit",
    "LogCapture",
    "Report",
    "budget",
    "fit",
    "free_memory",
    "margin_bytes",
    "parse_report",
    "per_token_costs",
]

MIB = 2**20
#: Most slots ``parallel = "auto"`` chooses: Claude Code sends up to 3-4
#: requests at once (the main turn, title and topic requests, subagents).
AUTO_MAX_SLOTS = 4
#: The smallest ``context_window`` "auto" may choose (below it, a start-up error).
MIN_AUTO_WINDOW = 2048

_CACHE_LINE = re.compile(
    r"(?P<kind>llama_kv_cache|llama_memory_recurrent): size =\s*(?P<mib>[\d.]+) MiB \(\s*(?P<cells>\d+) "
    r"cells,\s*(?P<layers>\d+) layers"
)
_COMPUTE_LINE = re.compile(r"(?P<dev>\S+) compute buffer size =\s*(?P<mib>[\d.]+) MiB")
_FLASH_LINE = re.compile(r"Flash Attention (?:was auto, set to )?(?P<state>enabled|disabled)", re.IGNORECASE)


@dataclass(frozen=True)
class Cache:
    """One cache llama.cpp allocated: ``recurrent`` for a recurrent state."""

    recurrent: bool
    cells: int
    layers: int
    nbytes: int


@dataclass
class Report:
    """What llama.cpp said while it made a context."""

    caches: list[Cache] = field(default_factory=list)
    compute_bytes: int = 0
    flash_attn: bool | None = None  # None: not said

    @property
    def kv_bytes(self) -> int:
        """Bytes of every cache (KV and recurrent state)."""
        return sum(c.nbytes for c in self.caches)


def parse_report(lines: list[str]) -> Report:
    """The caches, compute buffers and flash attention state in llama.cpp's log lines."""
    report = Report()
    for line in lines:
        if m := _CACHE_LINE.search(line):
            report.caches.append(
                Cache(
                    m["kind"] == "llama_memory_recurrent",
                    int(m["cells"]),
                    int(m["layers"]),
                    round(float(m["mib"]) * MIB),
                )
            )
        elif m := _COMPUTE_LINE.search(line):
            report.compute_bytes += round(float(m["mib"]) * MIB)
        elif m := _FLASH_LINE.search(line):
            report.flash_attn = m["state"].lower() == "enabled"
    return report


class LogCapture:
    """llama.cpp's log lines while a context is made.

    llama.cpp has one process-wide log callback. The first capture installs
    one that hands every line to llama-cpp-python's own (which prints it
    when ``verbose``) and, while a capture is open, keeps it too. Captures
    are serialized (one context is made at a time), so lines of another
    model's context never mix in.
    """

    _lock = threading.Lock()
    _lines: list[str] | None = None
    _forward = True
    _installed: Any = None

    @classmethod
    def _install(cls) -> None:
        if cls._installed is not None:
            return
        from llama_cpp import _logger

        forward = _logger.llama_log_callback

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            lines = cls._lines
            if lines is not None:
                lines.append(text.decode("utf-8", "replace"))
            if lines is None or cls._forward:
                forward(level, text, user_data)

        cls._installed = callback  # kept alive: llama.cpp holds a raw pointer to it
        llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))

    @classmethod
    @contextmanager
    def capture(cls, *, forward: bool = False) -> Iterator[list[str]]:
        """The lines logged inside the ``with`` block (one block at a time),
        handed on to llama-cpp-python's logging too when ``forward`` (the
        ``verbose`` setting): its warnings there are about sizes Missive
        chose on purpose (a pool larger than the trained context: each
        conversation still keeps to ``context_window``)."""
        with cls._lock:
            cls._install()
            lines: list[str] = []
            cls._lines, cls._forward = lines, forward
            try:
                yield lines
            finally:
                cls._lines, cls._forward = None, True


@dataclass(frozen=True)
class Costs:
    """KV bytes of a context, as llama.cpp allocated them for a probe.

    Attributes:
        per_token: bytes of one pool cell (keys and values of every layer
            that keeps the whole context).
        per_seq: bytes each sequence adds whatever its length (the
            recurrent state; the window of sliding-window layers).
        fixed: bytes that depend on neither (a window cache's ``n_ubatch``
            extra cells).
        compute: the probe's compute buffers (a lower bound of the real ones).
        flash_attn: whether flash attention ended up on (None: not said).
    """

    per_token: int
    per_seq: int
    fixed: int
    compute: int
    flash_attn: bool | None

    def kv_bytes(self, pool: int, slots: int) -> int:
        """Bytes of the caches for ``pool`` cells and ``slots`` sequences."""
        return pool * self.per_token + slots * self.per_seq + self.fixed


def per_token_costs(report: Report, probe_cells: int, n_swa: int) -> Costs:
    """Split a probe context's caches (made with ``probe_cells`` cells and one
    sequence) into what grows with the pool, with the sequences, and neither:
    a cache of ``probe_cells`` cells holds the whole context; a smaller KV
    cache is a sliding window's (``n_swa`` cells a sequence plus ``n_ubatch``,
    llama.cpp's ``llama_kv_cache_iswa`` sizing); a recurrent state is per
    sequence."""
    per_token = per_seq = fixed = 0
    for cache in report.caches:
        if cache.recurrent:
            per_seq += cache.nbytes // max(1, cache.cells)
        elif cache.cells >= probe_cells:
            per_token += cache.nbytes // cache.cells
        else:
            cell = cache.nbytes // cache.cells
            per_seq += n_swa * cell
            fixed += max(0, cache.cells - n_swa) * cell
    return Costs(per_token, per_seq, fixed, report.compute_bytes, report.flash_attn)


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def _cgroup_room() -> int | None:
    """Bytes the cgroup (v2) may still take, None when it has no limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def ram() -> tuple[int, int]:
    """``(total, available)`` bytes of host memory: ``MemTotal`` and
    ``MemAvailable`` (memory the kernel can give without swapping, page cache
    included), bounded by a cgroup limit; without ``/proc``, the physical
    memory and half of it."""
    info = _meminfo()
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", 0)
    if not total:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = 8 * 1024**3
        available = total // 2
    room = _cgroup_room()
    if room is not None:
        available = min(available, room)
    return total, available


def vram() -> tuple[int, int]:
    """``(total, free)`` bytes of the GPUs llama.cpp sees (``ggml_backend_dev_memory``
    of every device of type GPU), ``(0, 0)`` without one."""
    try:
        from .placement import ggml

        lib = ggml()
    except (ImportError, AttributeError, OSError):
        return 0, 0
    total = free = 0
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        if lib.ggml_backend_dev_type(dev) != 1:  # GGML_BACKEND_DEVICE_TYPE_GPU (ggml-backend.h)
            continue
        f, t = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_dev_memory(dev, ctypes.byref(f), ctypes.byref(t))
        free += f.value
        total += t.value
    return total, free


def margin_bytes(total: int) -> int:
    """Memory left to everything else: a tenth of it, at least 512 MiB."""
    return max(512 * MIB, total // 10)


@dataclass(frozen=True)
class Budget:
    """Bytes the KV cache may take on one kind of memory, and how they were found."""

    nbytes: int
    where: str


def free_memory(
    *, on_gpu: bool, model_bytes: int, host_cache_bytes: int, host_weight_bytes: int = 0
) -> Budget:
    """What the KV cache may take on this machine: :func:`budget` of the
    GPUs' memory (:func:`vram`) and the host's (:func:`ram`)."""
    return budget(
        on_gpu=on_gpu,
        vram=vram(),
        ram=ram(),
        model_bytes=model_bytes,
        host_cache_bytes=host_cache_bytes,
        host_weight_bytes=host_weight_bytes,
    )


def budget(
    *,
    on_gpu: bool,
    vram: tuple[int, int],
    ram: tuple[int, int],
    model_bytes: int,
    host_cache_bytes: int,
    host_weight_bytes: int = 0,
) -> Budget:
    """What the KV cache may take, given ``(total, free)`` bytes of the GPUs
    and ``(total, available)`` of the host (pure: ``scripts/recipes`` gives
    it a machine's figures): the GPUs' free memory less the margin when it
    lives there (weights that tensor overrides keep in host memory,
    ``host_weight_bytes``, are named: they take RAM, not VRAM); else the
    available RAM less the weights (mapped from the file, they must stay
    resident), the host-memory prompt cache's budget and the margin."""
    if on_gpu:
        total, free = vram
        if total:
            margin = margin_bytes(total)
            host = f"; weights in host memory {host_weight_bytes // MIB} MiB (RAM)" * bool(host_weight_bytes)
            ram_total, ram_free = ram
            room = ram_free - host_cache_bytes - margin_bytes(ram_total)
            if host_weight_bytes and ram_total and host_weight_bytes > room:
                # Mapped from the file, they would be read from disk again and
                # again: the CPU's share of every token.
                host += (
                    f" > {max(0, room) // MIB} MiB of RAM left (available - host prompt cache - margin): "
                    "they will be paged from disk; keep fewer layers' experts in RAM or add memory"
                )
                log.warning("memory: weights kept in host memory do not fit the RAM%s", host)
            return Budget(
                max(0, free - margin),
                f"VRAM: {free // MIB} MiB free of {total // MIB} MiB - margin {margin // MIB} MiB{host}",
            )
    total, available = ram
    margin = margin_bytes(total)
    nbytes = max(0, available - model_bytes - host_cache_bytes - margin)
    return Budget(
        nbytes,
        f"RAM: {available // MIB} MiB available of {total // MIB} MiB - weights {model_bytes // MIB} MiB"
        f" - host prompt cache {host_cache_bytes // MIB} MiB - margin {margin // MIB} MiB",
    )


@dataclass(frozen=True)
class Fit:
    """The chosen sizes and the arithmetic that chose them (for the log)."""

    window: int
    slots: int
    pool: int
    kv_bytes: int
    arithmetic: str


def fit(
    model_id: str,
    costs: Costs,
    budget: Budget,
    *,
    trained: int,
    window: int | None,
    parallel: int | str,
    pool: int | str,
    unified: bool,
) -> Fit:
    """Choose ``context_window``, slots and the pool (module documentation).

    Args:
        window: the entry's ``context_window`` (None: auto, up to ``trained``).
        parallel: the ``parallel`` setting (``"auto"`` or a number).
        pool: the ``kv_pool_tokens`` setting (``"auto"`` or a number).
        unified: ``kv_unified`` (False: each slot has a whole window).

    Raises:
        ConfigError: one conversation of the window does not fit, or a set
            pool is smaller than the window.
    """
    per_token = max(1, costs.per_token)
    steps = [
        f"KV {costs.per_token} B/token + {costs.per_seq // 1024} KiB/sequence + {costs.fixed // 1024} KiB",
        budget.where + f" = {budget.nbytes // MIB} MiB for the KV cache",
    ]
    room = budget.nbytes - costs.fixed
    one = max(0, (room - costs.per_seq) // per_token)  # tokens one conversation could have
    if window is None:
        w = int(min(trained, one))
        steps.append(f"context_window auto = min(trained {trained}, fits {one}) = {w}")
        if w < min(trained, MIN_AUTO_WINDOW):
            raise ConfigError(_no_room(model_id, min(trained, MIN_AUTO_WINDOW), costs, budget))
    elif one < window:
        raise ConfigError(_no_room(model_id, window, costs, budget))
    else:
        w = window
    if isinstance(parallel, int):
        slots = parallel
    else:
        # Each slot costs its per-sequence state, and in a per-slot layout a whole window.
        each = costs.per_seq + (0 if unified else w * per_token)
        shared = w * per_token if unified else 0
        slots = int(max(1, min(AUTO_MAX_SLOTS, (room - shared) // max(1, each))))
        steps.append(f"parallel auto = {slots} (at most {AUTO_MAX_SLOTS})")
    if not unified:
        cells = slots * w
        steps.append(f"a KV cache per slot: {slots} x {w} = {cells} cells")
    elif isinstance(pool, int):
        if pool < w:
            raise ConfigError(
                f"model '{model_id}': kv_pool_tokens = {pool} is smaller than context_window = {w}: "
                "one conversation could not fit; raise kv_pool_tokens or lower context_window"
            )
        cells = pool
    else:
        fits = max(0, (room - slots * costs.per_seq) // per_token)
        cells = int(max(w, min(slots * w, fits)))
        steps.append(f"kv_pool_tokens auto = max(window {w}, min({slots} x {w}, fits {fits})) = {cells}")
    kv = costs.kv_bytes(cells, slots)
    steps.append(f"KV cache {kv // MIB} MiB")
    if kv > budget.nbytes:
        steps.append(
            f"over the free memory by {(kv - budget.nbytes) // MIB} MiB (as set by parallel/kv_pool_tokens)"
        )
    return Fit(w, slots, cells, kv, "; ".join(steps))


def _no_room(model_id: str, window: int, costs: Costs, budget: Budget) -> str:
    need = costs.kv_bytes(window, 1)
    return (
        f"model '{model_id}': one conversation of {window} tokens needs {need // MIB} MiB of KV cache "
        f"({costs.per_token} bytes a token), but only {max(0, budget.nbytes) // MIB} MiB can be given to it "
        f"({budget.where}); lower context_window, use a smaller cache_type_k/cache_type_v (q8_0 halves it), "
        "or free memory"
    )
