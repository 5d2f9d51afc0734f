"""Models from Hugging Face repositories, through ``huggingface_hub``.

What ``hf://OWNER/REPO[:SELECTOR]`` resolves to (:func:`resolve_hf`):

* the repository's files are listed (``list_repo_tree``); a GGUF repository
  gives the model file chosen by :func:`choose_gguf` (every part of a split
  model) and, when the repository has one, a vision projector (``mmproj``
  in the name, :func:`choose_projector`); a repository with ``config.json``
  and ``*.safetensors`` and no GGUF is an MLX model folder;
* the files are downloaded into huggingface_hub's cache
  (``$HF_HUB_CACHE``, by default ``~/.cache/huggingface/hub``), shared with
  every other tool that uses it: a file already there is not fetched again,
  and an interrupted download resumes where it stopped;
* ``HF_TOKEN`` (or ``hf auth login``) authenticates, ``HF_ENDPOINT`` names
  another server (a mirror, or a test's stand-in), ``HF_HUB_OFFLINE=1``
  resolves from the cache alone; so does any failure to reach the server
  (with a warning), when the cache has the files;
* huggingface_hub draws its progress bars on stderr; :func:`quiet_progress`
  turns them off (``missive`` does when stderr is not a terminal).

Every failure is a :class:`~missive.models.sources.refs.ModelRefError` naming the
repository and the files: missing repository or file, gated repository
(its terms must be accepted on the website, and ``HF_TOKEN`` set), offline
without the files in the cache.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .local import LocalModel, human_size
from .refs import ModelRef, ModelRefError

__all__ = [
    "resolve_hf",
    "choose_gguf",
    "choose_projector",
    "quiet_progress",
    "hub_endpoint",
    "PREFERRED_QUANTS",
]

log = logging.getLogger("missive.sources")

#: Quantizations tried, in order, when a GGUF reference names none:
#: ``llama-server -hf`` defaults to Q4_K_M; the others are the next most
#: common in published repositories.
PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q6_K", "Q8_0", "BF16", "F16")

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
#: Files an MLX model folder is made of (mlx_lm.load reads the config, the
#: weights and the tokenizer; chat templates may be a file of their own).
MLX_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "*.model", "*.tiktoken", "*.txt", "*.py")


@dataclass(frozen=True)
class _Listing:
    files: dict[str, int | None]  # path in repo -> size (None: unknown, from the cache)
    cached_snapshot: Path | None  # set when listed from the cache (offline)


def hub_endpoint() -> str:
    """The Hugging Face server huggingface_hub talks to (``HF_ENDPOINT``)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


@contextlib.contextmanager
def quiet_progress(quiet: bool = True) -> Iterator[None]:
    """Within the block, huggingface_hub draws no progress bars (when
    ``quiet``); they are turned back on after if they were on before."""
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    was_on = not are_progress_bars_disabled()
    if quiet and was_on:
        disable_progress_bars()
    try:
        yield
    finally:
        if quiet and was_on:
            enable_progress_bars()


def _is_projector(path: str) -> bool:
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def _tag_pattern(tag: str) -> re.Pattern[str]:
    # The tag as a whole word of the path: "Q4_K" does not match "Q4_K_M".
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(tag)}(?![A-Za-z0-9_])", re.IGNORECASE)


def choose_gguf(files: list[str], selector: str | None) -> list[str]:
    """The files of the GGUF model ``selector`` names among a repository's
    ``files`` (paths in the repository): one file, or every part of a split
    model in order (``-00001-of-00003.gguf``...).

    ``selector`` is a path ending in ``.gguf`` (exactly, or a unique file
    name), or a quantization tag matched as a whole word of the path, any
    case (``q4_k_m`` matches ``Model-Q4_K_M.gguf`` and
    ``Q4_K_M/Model-00001-of-00002.gguf``, ``Q4_K`` does not match
    ``Q4_K_M``). None: the first of :data:`PREFERRED_QUANTS` present, else the
    first model file in sorted order. Projectors (``mmproj``) are never chosen.

    Raises:
        ModelRefError: no model file matches (the message lists those there are).
    """
    models = sorted(f for f in files if f.lower().endswith(".gguf") and not _is_projector(f))
    if not models:
        raise ModelRefError("no GGUF model file")
    if selector is not None and selector.lower().endswith(".gguf"):
        chosen = [f for f in models if f == selector] or [
            f for f in models if f.rsplit("/", 1)[-1] == selector
        ]
        if len(chosen) != 1:
            raise ModelRefError(f"no GGUF file {selector!r} (files: {', '.join(models)})")
        first = chosen[0]
    else:
        tags = [selector] if selector is not None else list(PREFERRED_QUANTS)
        first = ""
        for tag in tags:
            matching = [f for f in models if _tag_pattern(tag).search(f)]
            if matching:
                first = matching[0]
                break
        if not first:
            if selector is not None:
                raise ModelRefError(
                    f"no GGUF file with quantization {selector!r} (files: {', '.join(models)})"
                )
            first = models[0]
    split = _SPLIT.search(first)
    if split is None:
        return [first]
    head, count = first[: split.start()], int(split.group(2))
    parts = [f"{head}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [p for p in parts if p not in files]
    if missing:
        raise ModelRefError(f"split model {first} lacks parts: {', '.join(missing)}")
    return parts


def choose_projector(files: list[str]) -> str | None:
    """The vision projector among a repository's files (``mmproj`` in the
    name, ``.gguf``): F16 preferred (what llama.cpp's converters publish
    first), then BF16, F32, then the first in sorted order; None without one."""
    projectors = sorted(f for f in files if f.lower().endswith(".gguf") and _is_projector(f))
    for precision in ("f16", "bf16", "f32"):
        for f in projectors:
            if _tag_pattern(precision).search(f.rsplit("/", 1)[-1]):
                return f
    return projectors[0] if projectors else None


def _is_mlx(files: list[str]) -> bool:
    return "config.json" in files and any(f.endswith(".safetensors") for f in files)


def _hub_error(ref: ModelRef, exc: BaseException, files: list[str] | None = None) -> ModelRefError:
    from huggingface_hub import errors

    where = f"{ref.repo} at {hub_endpoint()}"
    names = f" ({', '.join(files)})" if files else ""
    if isinstance(exc, errors.GatedRepoError):
        return ModelRefError(
            f"{ref}: the repository {where} is gated: accept its terms on {hub_endpoint()}/{ref.repo} "
            "and give a token of that account in HF_TOKEN (or `hf auth login`)"
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return ModelRefError(
            f"{ref}: no repository {where}, or it is private (set HF_TOKEN to a token that can read it)"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return ModelRefError(f"{ref}: the repository {where} has no revision {ref.revision!r}")
    if isinstance(exc, errors.EntryNotFoundError):
        return ModelRefError(f"{ref}: the repository {where} has no file{names}")
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ModelRefError(f"{ref}: cannot fetch{names} from {where}: {detail}")


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _list(ref: ModelRef, download: bool) -> _Listing:
    """The repository's files: from the server, else (offline, the server
    unreachable, or ``download`` False) from the cached snapshot of the revision."""
    from huggingface_hub import HfApi, errors, snapshot_download

    if download and not _offline():
        try:
            tree = HfApi().list_repo_tree(ref.repo, recursive=True, revision=ref.revision)
            return _Listing(
                {item.path: getattr(item, "size", None) for item in tree if hasattr(item, "size")}, None
            )
        except (errors.GatedRepoError, errors.RepositoryNotFoundError, errors.RevisionNotFoundError) as exc:
            raise _hub_error(ref, exc) from None
        except Exception as exc:  # unreachable server, 5xx: the cache may do
            log.warning(
                "%s: cannot list %s at %s (%s); looking in the cache", ref, ref.repo, hub_endpoint(), exc
            )
    try:
        folder = Path(
            snapshot_download(ref.repo, revision=ref.revision, local_files_only=True, allow_patterns=[])
        )
    except Exception:
        if not download:
            raise ModelRefError(f"{ref}: not downloaded yet (`missive pull {ref}` fetches it)") from None
        if _offline():
            fix = f"unset HF_HUB_OFFLINE to download it (`missive pull {ref}`)"
            why = "HF_HUB_OFFLINE is set"
        else:
            fix = (
                "check the network (or the proxy), or point HF_ENDPOINT at a reachable mirror, "
                "then run this again"
            )
            why = f"{hub_endpoint()} cannot be reached"
        raise ModelRefError(
            f"{ref}: {why} and the cache ({_cache_dir()}) has nothing of {ref.repo}; {fix}"
        ) from None
    files: dict[str, int | None] = {
        p.relative_to(folder).as_posix(): None for p in folder.rglob("*") if p.is_file() or p.is_symlink()
    }
    return _Listing(files, folder)


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _fetch(ref: ModelRef, listing: _Listing, wanted: list[str]) -> list[Path]:
    """Local paths of ``wanted`` (paths in the repository), downloaded when
    not cached (resumed when partly downloaded)."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    if listing.cached_snapshot is not None:
        paths = [listing.cached_snapshot / f for f in wanted]
        missing = [f for f, p in zip(wanted, paths, strict=True) if not p.exists()]
        if missing:
            raise ModelRefError(
                f"{ref}: the cache lacks {', '.join(missing)} of {ref.repo}; "
                f"fetch it first with `missive pull {ref}`"
            )
        return paths
    out = []
    for name in wanted:
        if not isinstance(try_to_load_from_cache(ref.repo, name, revision=ref.revision), str):
            log.info(
                "%s: downloading %s (%s) from %s", ref, name, human_size(listing.files.get(name)), ref.repo
            )
        try:
            out.append(Path(hf_hub_download(ref.repo, name, revision=ref.revision)))
        except Exception as exc:
            raise _hub_error(ref, exc, [name]) from None
    return out


def resolve_hf(ref: ModelRef, *, download: bool = True) -> LocalModel:
    """The local files of a ``hf://`` reference, downloaded as needed (see
    the module doc); ``download`` False: from the cache only, never asking
    the server.

    Raises:
        ModelRefError: the repository or file is missing, gated or cannot be
            fetched, or the repository holds neither a GGUF nor an MLX model.
    """
    listing = _list(ref, download)
    files = sorted(listing.files)
    has_gguf = any(f.lower().endswith(".gguf") for f in files)
    if not has_gguf and _is_mlx(files):
        if ref.selector is not None:
            raise ModelRefError(f"{ref}: {ref.repo} is an MLX model folder; it takes no ':{ref.selector}'")
        return _fetch_mlx(ref, listing, files)
    if not has_gguf:
        shown = ", ".join(files[:12]) + (" ..." if len(files) > 12 else "")
        raise ModelRefError(
            f"{ref}: {ref.repo} has neither a GGUF file nor an MLX model (config.json and *.safetensors); "
            f"files: {shown or 'none'}"
        )
    try:
        chosen = choose_gguf(files, ref.selector)
    except ModelRefError as exc:
        raise ModelRefError(f"{ref}: {ref.repo}: {exc}") from None
    projector = choose_projector(files)
    wanted = chosen + ([projector] if projector else [])
    paths = _fetch(ref, listing, wanted)
    model_paths = paths[: len(chosen)]
    return LocalModel(
        ref=ref,
        format="gguf",
        path=model_paths[0],
        projector=paths[-1] if projector else None,
        files=tuple(paths),
        source=f"Hugging Face {ref.repo}" + (f"@{ref.revision}" if ref.revision else ""),
    )


def _fetch_mlx(ref: ModelRef, listing: _Listing, files: list[str]) -> LocalModel:
    from huggingface_hub import snapshot_download

    wanted = [f for f in files if any(fnmatch.fnmatch(f.rsplit("/", 1)[-1], p) for p in MLX_PATTERNS)]
    if listing.cached_snapshot is not None:
        folder = listing.cached_snapshot
    else:
        total = sum(listing.files.get(f) or 0 for f in wanted)
        log.info("%s: MLX model folder, %d files (%s) from %s", ref, len(wanted), human_size(total), ref.repo)
        try:
            folder = Path(
                snapshot_download(ref.repo, revision=ref.revision, allow_patterns=list(MLX_PATTERNS))
            )
        except Exception as exc:
            raise _hub_error(ref, exc, wanted) from None
    missing = [f for f in wanted if not (folder / f).exists()]
    if missing:
        raise ModelRefError(f"{ref}: the cached folder of {ref.repo} lacks {', '.join(missing)}")
    return LocalModel(
        ref=ref,
        format="mlx",
        path=folder,
        projector=None,
        files=tuple(folder / f for f in wanted),
        source=f"Hugging Face {ref.repo}" + (f"@{ref.revision}" if ref.revision else ""),
    )
