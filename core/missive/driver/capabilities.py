"""What a driver declares it can do.

A driver's :class:`Capabilities` is a frozen pydantic model, declared on its
:class:`~missive.kernel.specs.DriverSpec` (so ``missive plugins`` can list it without
importing the driver) and refined per model by the driver instance (a model
entry may say it has vision, for example).

The core never weakens a request to fit a driver:
:func:`missive.messages.capabilities.check_request` (the answer's policy)
raises :class:`~missive.protocol.errors.CapabilityError` naming the first
missing capability.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Capabilities", "ToolChoiceMode"]

ToolChoiceMode = Literal["auto", "any", "tool", "none"]


class Capabilities(BaseModel):
    """Declared abilities of a driver (or of one model served by it).

    Attributes:
        tool_choice: the ``tool_choice`` modes the driver can honour exactly.
            Empty means the driver takes no ``tools`` at all.
        strict_tools: the modes in which ``strict: true`` tool schemas are
            enforced (constrained decoding), not merely requested.
        parallel_tool_calls: can emit more than one tool_use block per turn.
        input_media: image media types the model takes (``image/png``,
            ``image/jpeg``, ``image/gif``, ``image/webp``). Empty: text only.
            Declaring one is enough for every image: the core converts the
            others (docs/media.md). Documents need nothing: the core turns
            them into text.
        image_max_edge: the longest image side the model should get, in
            pixels; larger images are downscaled (None: ``media.image_max_edge``).
        thinking: can produce reasoning as thinking blocks (``thinking.type: enabled``).
        structured_output: can enforce ``output_config.format`` json_schema.
        sampling: which of ``temperature``, ``top_p``, ``top_k`` are honoured.
        stop_sequences: honours ``stop_sequences`` (the core matches them; a
            driver only has to be able to stop when told).
        count_tokens: ``exact`` (the model's tokenizer on the rendered prompt),
            ``approximate`` (an estimate) or ``none``.
        prompt_caching: reuses a shared prompt prefix and reports it as
            ``cache_read_input_tokens``.
        in_process: the model runs inside the Missive process.
        max_concurrency: requests generated at once per model (None: unbounded,
            the backend queues). Enforced by the core for every driver, with a
            bounded wait queue in front (:mod:`missive.serving.admission`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_choice: frozenset[ToolChoiceMode] = frozenset()
    strict_tools: frozenset[ToolChoiceMode] = frozenset()
    parallel_tool_calls: bool = False
    input_media: frozenset[str] = frozenset()
    image_max_edge: int | None = None
    thinking: bool = False
    structured_output: bool = False
    sampling: frozenset[Literal["temperature", "top_p", "top_k"]] = frozenset(
        {"temperature", "top_p", "top_k"}
    )
    stop_sequences: bool = True
    count_tokens: Literal["exact", "approximate", "none"] = "exact"
    prompt_caching: bool = False
    in_process: bool = False
    max_concurrency: int | None = Field(default=None, ge=1)

    def summary(self) -> dict[str, object]:
        """A JSON-friendly dict with sets sorted, for listings."""
        data = self.model_dump()
        return {k: sorted(v) if isinstance(v, frozenset) else v for k, v in data.items()}
