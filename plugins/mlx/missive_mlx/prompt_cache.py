"""Cached prompt prefixes: KV caches kept across requests, least recently used evicted.

mlx-lm evaluates a prompt into a per-layer cache (``make_prompt_cache``) that
``generate_step`` extends in place. After a request the cache holds the prompt
and the generated tokens; the next turn of the same conversation starts with
exactly those tokens (the template renders the previous answer back), so only
the new part has to be evaluated.

Rules (the same as mlx-lm's own server, ``mlx_lm/server.py`` +
``LRUPromptCache``, but without its copy on every hit):

* an entry is a token list and the cache holding exactly those tokens;
* for a prompt, the entry sharing the longest common token prefix wins (ties:
  the most recently used); at least one prompt token is always left to
  evaluate, since generation needs the logits of the last one;
* an entry that is a prefix of the prompt is taken out of the store and
  extended in place (no copy); an entry that diverges from the prompt is
  copied and the copy trimmed to the common prefix (``trim_prompt_cache``), so
  the entry still serves its own conversation;
* for a model whose image tokens read each other both ways (Gemma 3), a
  reused prefix that ends inside an image is cut back to the image's start
  (:func:`image_start`), so the image is read again whole, as the llamacpp
  driver restores an image whole or not at all;
* caches that cannot be trimmed (recurrent layers, a sliding window that has
  wrapped: ``can_trim_prompt_cache`` is False) are reused only when they are
  a prefix of the prompt, as they are (nothing to cut), and are copied rather
  than taken out (``copy.deepcopy``, as mlx-lm's ``LRUPromptCache.
  fetch_nearest_cache`` does on every hit): the entry is the only state of
  that prefix, and a prompt that diverges after it later (an edited last
  turn) can start from it again. The runner adds checkpoints of such caches
  at the end of each prompt (:meth:`missive_mlx.runner.MlxRunner._checkpoint`),
  kept apart: up to ``capacity`` checkpoints besides ``capacity`` entries, so
  a conversation's checkpoint is not evicted by the entries of the side
  requests between its turns;
* after a request its cache is stored under its tokens; entries that are a
  prefix of it are dropped when it can be trimmed (it serves them too, by
  trimming), kept otherwise; beyond ``capacity`` entries the least recently
  used are evicted. Memory is thus at most ``capacity`` caches (twice that
  with checkpoints) plus the one in use, each at most the context window.

Every entry remembers the cache scope of the prompt it was computed for
(``Prompt.cache_scope``, the request's API key: docs/operations.md#prompt-cache-scopes):
it serves, and is replaced by, prompts of that scope only.

The store is locked: :meth:`PromptCacheStore.reusable` runs in tokenizing
threads while the generation thread takes and puts entries.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from missive.api import common_prefix

__all__ = ["CachedPrefix", "PromptCacheStore", "common_prefix", "image_start"]


def image_start(n: int, *lists: Sequence[int]) -> int:
    """``n`` (a prefix length that ``lists`` share), moved back to the start
    of an image its position continues in one of them: an image's positions
    hold one negative synthetic id (:func:`missive_mlx.vision.image_id`),
    so position ``n`` continues an image when it holds the id of
    position ``n - 1``."""
    for tokens in lists:
        if 0 < n < len(tokens) and tokens[n - 1] < 0 and tokens[n] == tokens[n - 1]:
            image = tokens[n]
            while n > 0 and tokens[n - 1] == image:
                n -= 1
            return n
    return n


@dataclass
class CachedPrefix:
    """``tokens``: what ``cache`` (mlx-lm per-layer caches) holds, in order;
    ``checkpoint``: a copy taken at the end of a prompt (evicted among its kind)."""

    tokens: list[int]
    cache: list[Any]
    checkpoint: bool = False
    scope: Hashable | None = None  # the Prompt.cache_scope it was computed for


class PromptCacheStore:
    """Up to ``capacity`` cached prefixes of one model.

    Args:
        capacity: entries kept (0: nothing is ever stored).
        can_trim: ``mlx_lm.models.cache.can_trim_prompt_cache``.
        trim: ``mlx_lm.models.cache.trim_prompt_cache`` (cache, n) -> tokens trimmed.
        whole_images: cut a reused prefix back to the start of an image it
            ends inside (:func:`image_start`).
    """

    def __init__(
        self,
        capacity: int,
        *,
        can_trim: Callable[[list[Any]], bool],
        trim: Callable[[list[Any], int], int],
        whole_images: bool = False,
    ) -> None:
        self.capacity = capacity
        self._whole_images = whole_images
        self._can_trim = can_trim
        self._trim = trim
        self._entries: list[CachedPrefix] = []  # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _reuse(self, entry: CachedPrefix, prompt: Sequence[int], scope: Hashable | None) -> int:
        if entry.scope != scope:
            return 0  # another key's prompt
        n = min(common_prefix(entry.tokens, prompt), len(prompt) - 1)
        if self._whole_images:
            n = image_start(n, entry.tokens, prompt)
        if n < len(entry.tokens) and not self._can_trim(entry.cache):
            return 0
        return max(n, 0)

    def _best(self, prompt: Sequence[int], scope: Hashable | None) -> tuple[int, int]:
        """(index, reused tokens) of the best entry; (-1, 0) if none helps."""
        best, best_n = -1, 0
        for i, entry in enumerate(self._entries):  # later = more recent: >= prefers it
            n = self._reuse(entry, prompt, scope)
            if n > 0 and n >= best_n:
                best, best_n = i, n
        return best, best_n

    def reusable(self, prompt: Sequence[int], scope: Hashable | None = None) -> int:
        """Prompt tokens :meth:`take` would serve from the cache right now
        to a prompt of cache scope ``scope``."""
        with self._lock:
            return self._best(prompt, scope)[1]

    def take(
        self, prompt: Sequence[int], fresh: Callable[[], list[Any]], scope: Hashable | None = None
    ) -> tuple[list[Any], int]:
        """A cache to evaluate ``prompt`` into, and how many of its tokens it holds.

        The caller evaluates ``prompt[reused:]`` into the returned cache. ``fresh``
        makes an empty cache (``make_prompt_cache(model)``) when nothing is reusable.
        Runs in the generation thread (copying and trimming touch MLX arrays).
        """
        with self._lock:
            index, n = self._best(prompt, scope)
            if index < 0:
                return fresh(), 0
            entry = self._entries[index]
            if n == len(entry.tokens) and self._can_trim(entry.cache):
                del self._entries[index]  # extended in place, stored again afterwards
                return entry.cache, n
            self._entries.append(self._entries.pop(index))  # used: most recent
            cache = copy.deepcopy(entry.cache)
        if n == len(entry.tokens):
            return cache, n  # an untrimmable prefix: the copy is extended, the entry kept
        if self._trim(cache, len(entry.tokens) - n) != len(entry.tokens) - n:
            return fresh(), 0
        return cache, n

    def put(
        self, tokens: list[int], cache: list[Any], *, checkpoint: bool = False, scope: Hashable | None = None
    ) -> None:
        """Store ``cache`` (holding exactly ``tokens``, computed for a prompt
        of cache scope ``scope``) as the most recent entry, or checkpoint
        (evicted only by checkpoints)."""
        if self.capacity == 0 or not tokens:
            return
        trimmable = self._can_trim(cache)
        with self._lock:
            kept = [
                e
                for e in self._entries
                if e.scope != scope
                or not (
                    e.tokens == tokens
                    or (trimmable and len(e.tokens) < len(tokens) and tokens[: len(e.tokens)] == e.tokens)
                )
            ]
            kept.append(CachedPrefix(list(tokens), cache, checkpoint, scope))
            same = [e for e in kept if e.checkpoint == checkpoint]
            evicted = {id(e) for e in same[: max(0, len(same) - self.capacity)]}  # least recent of its kind
            self._entries = [e for e in kept if id(e) not in evicted]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
