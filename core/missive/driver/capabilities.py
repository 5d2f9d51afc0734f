"""What a driver declares it can do, and the check of a request against it.

A driver's :class:`Capabilities` is a frozen pydantic model, declared on its
:class:`~missive.kernel.specs.DriverSpec` (so ``missive plugins`` can list it without
importing the driver) and refined per model by the driver instance (a model
entry may say it has vision, for example).

The core never weakens a request to fit a driver: :func:`check_request` raises
:class:`~missive.protocol.errors.CapabilityError` naming the first missing capability.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..protocol.errors import CapabilityError

if TYPE_CHECKING:
    from ..protocol.schema.request import CountTokensRequest
    from .tools import ToolChoice, ToolDefinition

__all__ = ["Capabilities", "ToolChoiceMode", "check_request"]

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
            bounded wait queue in front (:mod:`missive.server.admission`).
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


def _fmt(values: frozenset[str]) -> str:
    return ", ".join(f'"{v}"' for v in sorted(values))


def check_request(
    request: CountTokensRequest,
    caps: Capabilities,
    *,
    model: str,
    driver: str,
    tools: tuple[ToolDefinition, ...] = (),
    tool_choice: ToolChoice | None = None,
    image_fallback: bool = False,
) -> None:
    """Raise :class:`CapabilityError` if ``request`` needs what ``caps`` lacks.

    Checked, in order: the tool_choice mode (when tools are offered), strict
    tools in that mode, parallel calls, tool blocks in the history, image
    blocks (also inside tool_result content) for a model that takes no image
    type, unless ``image_fallback`` (an operator's ``media.image_fallback``
    turns them into text), thinking ``enabled``, structured output, sampling
    parameters, stop sequences. Document blocks need no capability: the core
    turns them into text.
    ``thinking.type: adaptive`` needs no capability: the API lets the model
    decide not to think.
    """

    def fail(capability: str, supported: str) -> None:
        raise CapabilityError(capability=capability, model=model, driver=driver, supported=supported)

    if tools:
        mode = tool_choice.mode if tool_choice is not None else "auto"
        if mode not in caps.tool_choice:
            supported = f"tool_choice modes {_fmt(caps.tool_choice)}" if caps.tool_choice else "no tool use"
            fail(f'tools with tool_choice "{mode}"', supported)
        if mode != "none" and any(t.strict for t in tools) and mode not in caps.strict_tools:
            supported = (
                f"strict tools with tool_choice {_fmt(caps.strict_tools)}"
                if caps.strict_tools
                else "no strict tools"
            )
            fail(f'strict tools with tool_choice "{mode}"', supported)
    if request.uses_tool_blocks() and not caps.tool_choice:
        fail("tool_use/tool_result content blocks", "no tool use")
    images = frozenset(m for m in caps.input_media if m.startswith("image/"))
    if not images and not image_fallback:
        for media in request.media_types():
            if media == "image" or media.startswith("image/"):
                fail(f"input media type {media}", "text only")
    if request.thinking is not None and request.thinking.type == "enabled" and not caps.thinking:
        fail(
            'thinking {"type": "enabled"}',
            'thinking "disabled", "adaptive" or "between_tools" (no reasoning)',
        )
    if request.output_format_schema() is not None and not caps.structured_output:
        fail("output_config.format (structured output)", "free-form text")
    for name in ("temperature", "top_p", "top_k"):
        if getattr(request, name) is not None and name not in caps.sampling:
            fail(name, f"sampling parameters {_fmt(caps.sampling)}")
    if request.stop_sequences and not caps.stop_sequences:
        fail("stop_sequences", "no stop sequences")
