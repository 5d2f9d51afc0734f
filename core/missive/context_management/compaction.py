"""``compaction``: the model summarises the conversation into a signed block.

The API (SDK 2.15 docstrings of ``compaction``, ``BetaCompactionConfigParam``
and ``BetaCompactionBlockParam``): a request with ``compaction: {"type":
"summarize", "instructions"?}`` is a compaction request; the conversation in
``messages`` is summarised and the response holds only the resulting
``compaction`` block, ``stop_reason: "compaction"``. Later requests send the
block first in ``messages``, in place of the messages it summarises.
``instructions`` replace the server's summarisation prompt (blank counts as
absent). ``count_tokens`` accepts the parameter and ignores it. A block whose
``content`` is null is a failed compaction, a no-op.

Here the model itself writes the summary: the conversation is rendered as
for an answer (same system prompt and tools, so a prefix the model has in
its cache is reused: compaction comes when the context is large, and a
local model would otherwise prefill it all again) followed by a user turn
holding the summarisation prompt, with thinking off. The block is signed with
the thinking key under its own domain
(:meth:`missive.thinking.signing.Signer.sign_compaction`) and streamed whole
(:class:`missive.messages.extras.CompactionStream`).

Sent back, the block must be the conversation's first block and verify;
otherwise the API's errors, with ``error.details.error_code`` as the SDK's
typed errors read it: ``compaction_block_misplaced``,
``compaction_block_ambiguous`` (two blocks with content),
``compaction_content_mismatch`` (a genuine signature, recording the digest
of other content: the text was edited; SDK 2.16
``CompactionContentMismatchError``), ``compaction_signature_invalid`` (a
signature this server did not make), and for a compaction request
``compaction_incomplete_turn`` (the last assistant turn has unanswered tool
calls) and ``compaction_nothing_to_summarize``. A verified block is rendered
as a user turn holding the summary, so every chat template (many refuse a
conversation that starts with an assistant turn) accepts it.
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import InvalidRequestError
from ..protocol.schema.blocks import CompactionBlock, TextBlock, ToolUseBlock
from ..protocol.schema.request import CountTokensRequest, Message, ToolChoiceAuto
from ..thinking.signing import Signer

__all__ = [
    "CompactionError",
    "SUMMARY_PROMPT",
    "SUMMARY_HEADER",
    "expand_compaction",
    "summarisation_request",
]

#: The server's summarisation prompt (replaced by ``compaction.instructions``).
SUMMARY_PROMPT = (
    "Stop here and write a summary of the whole conversation above, to be used in place of it from now on. "
    "Keep everything needed to continue the work: the user's goals and requests, decisions made, facts "
    "learned, tool calls made and what they returned, files, names and values that matter, and what "
    "remains to be done. Write plain text, concise but complete; do not call tools and do not answer "
    "anything new."
)

#: The line put before a summary when it is rendered back into a prompt.
SUMMARY_HEADER = "Summary of the conversation so far:"


class CompactionError(InvalidRequestError):
    """A 400 about compaction, with the API's ``error.details.error_code``
    (the SDK raises its typed ``Compaction...Error`` from it)."""

    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _verified_summary(req: CountTokensRequest, signer: Signer) -> tuple[int, int] | None:
    """``(message, block)`` of the one compaction block with content, after
    checking its place and signature; None when there is none.

    Raises:
        CompactionError: misplaced, ambiguous, edited, or not signed by this server.
    """
    found: list[tuple[int, int, CompactionBlock]] = []
    for m, message in enumerate(req.messages):
        for b, block in enumerate(message.blocks()):
            if not isinstance(block, CompactionBlock):
                continue
            if message.role == "system":
                raise CompactionError(
                    "compaction_block_misplaced",
                    f"messages.{m}.content.{b}: a compaction block cannot be in a system message",
                )
            if block.content is not None:
                found.append((m, b, block))
    if not found:
        return None
    if len(found) > 1:
        m, b, _ = found[1]
        raise CompactionError(
            "compaction_block_ambiguous",
            f"messages.{m}.content.{b}: more than one compaction block with content; "
            "send only the last one returned",
        )
    m, b, block = found[0]
    before = req.messages[0].blocks()[:b] if m == 0 else []
    if m != 0 or any(not isinstance(x, CompactionBlock) for x in before):
        raise CompactionError(
            "compaction_block_misplaced",
            f"messages.{m}.content.{b}: a compaction block must be the first block of `messages`",
        )
    assert block.content is not None
    check = signer.check_compaction(block.signature, block.content)
    if check == "content_mismatch":
        raise CompactionError(
            "compaction_content_mismatch",
            f"messages.{m}.content.{b}: the `compaction` block's `content` differs from the text "
            "its `signature` recorded; send the block back as it was returned",
        )
    if check != "valid":
        raise CompactionError(
            "compaction_signature_invalid",
            f"messages.{m}.content.{b}: Invalid `signature` in `compaction` block: "
            "it was not produced by this "
            "server for this content",
        )
    return m, b


def expand_compaction(req: CountTokensRequest, signer: Signer) -> CountTokensRequest:
    """``req`` with its compaction blocks checked and rendered: the block
    with content becomes a user message holding the summary (in place of an
    assistant message that held only compaction blocks, so later indices do
    not move), null-content blocks are dropped. Unchanged without any.

    Raises:
        CompactionError: see :func:`_verified_summary`.
    """
    if not any(isinstance(b, CompactionBlock) for m in req.messages for b in m.blocks()):
        return req
    head = _verified_summary(req, signer)
    messages: list[Message] = []
    for m, message in enumerate(req.messages):
        blocks = message.blocks()
        kept = [b for b in blocks if not isinstance(b, CompactionBlock)]
        summary: CompactionBlock | None = None
        if head is not None and m == head[0]:
            summary = blocks[head[1]]
        if summary is not None:
            text = TextBlock(type="text", text=f"{SUMMARY_HEADER}\n\n{summary.content}")
            messages.append(Message(role="user", content=[text]))
        if kept and len(kept) != len(blocks):
            messages.append(message.model_copy(update={"content": kept}))
        elif kept:
            messages.append(message)
    if not messages:
        raise CompactionError(
            "compaction_nothing_to_summarize",
            "messages: only failed compaction blocks (content null); nothing to answer",
        )
    return req.model_copy(update={"messages": messages})


def summarisation_request(req: CountTokensRequest, *, can_choose: bool) -> CountTokensRequest:
    """The request the model answers with a summary: ``req`` (compaction
    blocks already expanded) plus a user turn with the summarisation prompt,
    thinking off, no stop sequences or output format. The tools stay as the
    conversation had them, so the rendered prompt up to the new turn is the
    one the model has in its prefix cache (``tool_choice: none`` would leave
    them out of the prompt); a ``tool_choice`` that forces a call becomes
    ``auto`` where the driver can choose (``can_choose``), else the tools are
    left out. The prompt tells the model not to call tools; text written
    before a call it makes anyway is the summary.

    Raises:
        CompactionError: nothing to summarise, or the last assistant turn
            has tool calls without results.
    """
    assert req.compaction is not None
    if not req.messages:
        raise CompactionError("compaction_nothing_to_summarize", "messages: nothing to summarize")
    last = req.messages[-1]
    if last.role == "assistant" and any(isinstance(b, ToolUseBlock) for b in last.blocks()):
        raise CompactionError(
            "compaction_incomplete_turn",
            f"messages.{len(req.messages) - 1}: the conversation ends with tool calls "
            "whose results were not sent; "
            "send the tool_result blocks first, then compact",
        )
    prompt = req.compaction.prompt_override() or SUMMARY_PROMPT
    update: dict[str, Any] = {
        "messages": [*req.messages, Message(role="user", content=[TextBlock(type="text", text=prompt)])],
        "thinking": None,
        "stop_sequences": None,
        "output_format": None,
        "output_config": req.output_config.model_copy(update={"format": None}) if req.output_config else None,
    }
    if req.tools and req.tool_choice is not None and req.tool_choice.type in ("any", "tool"):
        if can_choose:
            update["tool_choice"] = ToolChoiceAuto(type="auto")
        else:
            update["tools"], update["tool_choice"] = None, None
    return req.model_copy(update=update)
