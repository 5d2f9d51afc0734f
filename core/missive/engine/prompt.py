"""The prompt path of in-process models: render with the chat template, tokenize.

One path for :meth:`~missive.driver.interface.Driver.count_tokens` and
:meth:`~missive.driver.interface.Driver.generate`, so their counts are equal by
construction:

1. :func:`missive.tools.render.template_messages` turns the conversation and
   tools into the template's messages (images replaced by the runner's marker
   texts when the model takes images, see
   :class:`~missive.engine.runner.ImageMarks`);
2. :func:`missive.chat_template.rendering.render_segments` renders them with the model's
   chat template in jinja2's sandbox, with the prefill, the template's
   ``bos_token``/``eos_token`` and the reasoning switches of the request
   (:meth:`missive.driver.thinking.ThinkingPlan.template_kwargs`; switched off
   when a constraint makes the whole reply a call or a JSON value), client
   strings holding a control token's text escaped;
3. :meth:`~missive.engine.runner.Runner.tokenize` tokenizes the pieces (client
   text as plain text, the template's with special tokens parsed).
"""

from __future__ import annotations

from collections.abc import Callable

from ..chat_template.rendering import render_segments
from ..driver.interface import GenerationRequest
from ..driver.parsing import ReasoningParser
from ..driver.thinking import ThinkingPlan
from ..tools.render import template_messages
from .runner import ImageMarks, ModelInfo, Prompt, Runner

__all__ = ["PromptPath"]


class PromptPath:
    """Renders and tokenizes requests for one loaded model (thread-safe).

    Args:
        runner: the model's runner (tokenizes).
        info: what the runner's ``load`` returned (template, special texts).
        reasoning: returns the model's reasoning parser class, or None.
    """

    def __init__(
        self, runner: Runner, info: ModelInfo, reasoning: Callable[[], type[ReasoningParser] | None]
    ) -> None:
        self.runner = runner
        self.info = info
        self.reasoning = reasoning

    def render(
        self, request: GenerationRequest, *, constrained: bool = False
    ) -> tuple[list[tuple[str, bool]], ImageMarks | None]:
        """The prompt as ``(text, is_client_text)`` pieces and the images its
        markers stand for (None when the model takes no images).

        Args:
            constrained: a constraint makes the whole reply a tool call or a
                JSON value: the template's reasoning is switched off.

        Raises:
            InvalidRequestError: the template rejected the conversation.
            ApiError: the template failed.
        """
        info = self.info
        marker = self.runner.image_marker
        marks = ImageMarks(marker) if marker is not None else None
        messages, extra = template_messages(
            request, info.chat_template, marks.mark if marks is not None else None
        )
        switches = ThinkingPlan().template_kwargs() if constrained else request.thinking.template_kwargs()
        pieces = render_segments(
            info.chat_template,
            messages,
            control_texts=info.control_texts,
            prefill=request.conversation.prefill,
            bos_token=info.bos_text,
            eos_token=info.eos_text,
            **{**switches, **extra},
        )
        return pieces, marks

    def tokenize(self, request: GenerationRequest, *, constrained: bool = False) -> Prompt:
        """:meth:`render`, then the runner's tokenizer: the prompt's tokens
        (and media, to :meth:`~missive.engine.runner.Prompt.close`).

        Raises:
            InvalidRequestError: the template rejected the conversation, or an
                image cannot be used.
            ApiError: the template failed, or the backend could not tokenize.
        """
        pieces, marks = self.render(request, constrained=constrained)
        return self.runner.tokenize(pieces, marks)

    def opened(self, pieces: list[tuple[str, bool]]) -> str:
        """The reasoning tag the rendered prompt leaves open (``<think>``), or ""."""
        cls = self.reasoning()
        if cls is None:
            return ""
        return cls.prompt_prefix("".join(text for text, _ in pieces))
