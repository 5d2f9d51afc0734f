"""Which adapter set each decode step runs with: one ``llama_decode`` per set.

A model's context decodes every sequence of a ``llama_decode`` through the
adapters set on it (``llama_set_adapters_lora``, :mod:`missive_llamacpp.lora`),
so sequences of different adapter sets cannot share a step. llama-server
batches two slots together only when their adapters are equal
(``server_slot::can_batch_with``: ``are_lora_equal(lora, other_slot.lora)``,
``tools/server/server-context.cpp``). Here too: the runner's running
sequences are grouped by their prompt's ``variant`` (None: the model's own
``settings.lora``; a tuple: the set of a model entry with ``settings.base``,
:mod:`missive_llamacpp.shared`), and each step decodes one group, the next
group after the last one stepped (:func:`next_group`, round robin), so with
two sets each gets every other step and neither starves; the others wait
that step (their result is ``PENDING``). The set is switched only when the
group changes (llama.cpp itself does nothing when the same set is set
again); a switch makes llama.cpp reserve its compute graph again before
the next decode (``src/llama-context.cpp``, :mod:`missive_llamacpp.lora`),
the price of alternating: with one set running, nothing is switched.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from missive.api import ApiError

from .lora import AdapterBank, Adapters

__all__ = ["Variants", "next_group"]


def _rank(variant: Hashable | None) -> tuple[bool, str]:
    """A fixed order of the sets: the model's own first, then by their key."""
    return (variant is not None, repr(variant))


def next_group(present: Iterable[Hashable | None], last: Hashable | None, stepped: bool) -> Hashable | None:
    """The set to step now among those of the running sequences
    (``present``, at least one): the first after ``last`` (the set of the
    previous step; ``stepped`` False: none yet) in their fixed order,
    wrapping around.

    Raises:
        ValueError: ``present`` is empty.
    """
    ordered = sorted(set(present), key=_rank)
    if not ordered:
        raise ValueError("no sequence to step")
    if not stepped:
        return ordered[0]
    after = [v for v in ordered if _rank(v) > _rank(last)]
    return after[0] if after else ordered[0]


class Variants:
    """The adapter sets of one loaded model and the one set on its context.

    Args:
        own: the model's ``settings.lora``, already set on the context.
        bank: the adapter files loaded against the model.
    """

    def __init__(self, own: Adapters | None = None, bank: AdapterBank | None = None) -> None:
        self.bank = bank if bank is not None else AdapterBank()
        self._sets: dict[Hashable | None, Adapters] = {None: own if own is not None else Adapters()}
        self.current: Hashable | None = None
        self._last: Hashable | None = None
        self._stepped = False
        #: Times the context's adapters were switched, and steps that left
        #: sequences of another set waiting (``status``: ``lora_switches``,
        #: ``lora_split_steps``).
        self.switches = 0
        self.split_steps = 0

    def add(self, key: Hashable, adapters: Adapters) -> None:
        """Another entry's set (model thread)."""
        self._sets[key] = adapters

    def choose(self, variants: list[Hashable | None]) -> Hashable | None:
        """The group to step now (:func:`next_group`); remembered as the last."""
        group = next_group(variants, self._last, self._stepped)
        if any(v != group for v in variants):
            self.split_steps += 1
        self._last, self._stepped = group, True
        return group

    def switch(self, ctx: Any, key: Hashable | None) -> None:
        """Set ``key``'s adapters on ``ctx`` unless they are set already.

        Raises:
            ApiError: no such set (its entry was not attached), or llama.cpp refused it.
        """
        if key == self.current:
            return
        adapters = self._sets.get(key)
        if adapters is None:
            raise ApiError("a prompt names LoRA adapters this model has not loaded")
        adapters.apply(ctx)
        self.current = key
        self.switches += 1
