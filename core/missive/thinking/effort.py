"""``output_config.effort`` on a model that does not reason.

API: ``output_config.effort`` (``low`` ... ``max``) sets how eagerly Claude
spends tokens (Anthropic docs, "Effort"); Claude Code sends it with every
request (contract section 7). Missive maps it to a reasoning model's depth
(:mod:`missive.driver.thinking`: gpt-oss's ``reasoning_effort``, the level of
adaptive thinking) and the models' capabilities say so (``effort.supported``
follows ``thinking``, :mod:`missive.models.capabilities`). A model whose
driver does not declare ``thinking`` has no depth to set: the field changes
nothing in its answer.

``thinking.type: "enabled"`` on such a model is a 400
(:func:`missive.messages.capabilities.check_request`): it asks for thinking
blocks the answer cannot hold. Effort asks for nothing the answer lacks, and
refusing it would refuse every Claude Code request to a model that does not
reason; so it is answered and reported as every request part Missive does
not act on (:mod:`missive.protocol.schema.unhonoured`, thinking through an
alias in :mod:`.through_alias`): in the ``missive-ignored`` header and the
log, a 400 in strict mode (:meth:`missive.messages.prepare.Notes.ignore`).
The OpenAI front door's ``reasoning_effort`` arrives as this field and is
reported the same way.
"""

from __future__ import annotations

from ..driver.capabilities import Capabilities
from ..protocol.schema.request import CountTokensRequest

__all__ = ["unreasoned_effort"]


def unreasoned_effort(req: CountTokensRequest, caps: Capabilities, *, model: str) -> list[str]:
    """The ``missive-ignored`` entry for ``output_config.effort`` sent to a
    model that does not reason (module doc), else nothing."""
    effort = req.output_config.effort if req.output_config is not None else None
    if effort is None or caps.thinking:
        return []
    return [f"output_config.effort (model {model} does not reason)"]
