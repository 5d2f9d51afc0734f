"""The check of a request against what its model's driver declares.

The core never weakens a request to fit a driver: :func:`check_request`
raises :class:`~missive.protocol.errors.CapabilityError` (a 400 naming the
capability, the model, the driver and what it supports) for the first
capability the request needs and the driver's
:class:`~missive.driver.capabilities.Capabilities` lack. Run by
:func:`missive.messages.prepare.build_generation` for every request.
"""

from __future__ import annotations

from ..driver.capabilities import Capabilities
from ..driver.tools import ToolChoice, ToolDefinition
from ..protocol.errors import CapabilityError
from ..protocol.schema.request import CountTokensRequest

__all__ = ["check_request"]


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
    image = request.first_image() if not images and not image_fallback else None
    if image is not None:
        where, media = image
        capability = f"input media type {media}"
        raise CapabilityError(
            capability=capability, model=model, driver=driver, supported="text only", where=where
        )
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
