"""Default ``register_reasoning_parsers``: the built-in reasoning parsers.

Order matters: the first spec with a marker in a chat template wins. Markers
are literal strings of the published chat templates:

* harmony: ``<|channel|>`` (gpt-oss), first because its template has no
  ``<think>`` but other formats' markers could appear in its text;
* think: ``<think>`` (DeepSeek-R1, Qwen3, QwQ, GLM-4.5+, MiniMax-M2, SmolLM3);
* mistral_think: ``[THINK]`` (Magistral);
* seed_think: ``<seed:think>`` (Seed-OSS), checked before ``think`` would
  not matter: ``<seed:think>`` does not contain ``<think>``;
* kimi_k3: ``open_tag('think'`` or ``<|open|>think<|sep|>`` (Kimi-K3's XTML
  ``think`` and ``response`` elements);
* gemma4_thought: ``<|channel>`` (Gemma 4's thought channel; not a
  substring of harmony's ``<|channel|>``, nor the other way round).
"""

from __future__ import annotations

from ..driver.parsing import ReasoningParserSpec
from ..kernel.hookspecs import hookimpl


@hookimpl
def register_reasoning_parsers() -> list[ReasoningParserSpec]:
    return [
        ReasoningParserSpec(
            name="harmony",
            factory="missive.reasoning.harmony:HarmonyReasoningParser",
            description="gpt-oss harmony: the analysis channel is reasoning, final is the answer",
            template_markers=("<|channel|>",),
        ),
        ReasoningParserSpec(
            name="think",
            factory="missive.reasoning.base:ThinkParser",
            description="<think>...</think> before the answer (DeepSeek-R1, Qwen3, GLM, MiniMax-M2)",
            template_markers=("<think>",),
        ),
        ReasoningParserSpec(
            name="mistral_think",
            factory="missive.reasoning.base:MistralThinkParser",
            description="[THINK]...[/THINK] before the answer (Magistral)",
            template_markers=("[THINK]",),
        ),
        ReasoningParserSpec(
            name="seed_think",
            factory="missive.reasoning.base:SeedThinkParser",
            description="<seed:think>...</seed:think> before the answer (Seed-OSS)",
            template_markers=("<seed:think>",),
        ),
        ReasoningParserSpec(
            name="gemma4_thought",
            factory="missive.reasoning.base:Gemma4ThinkParser",
            description="<|channel>thought ...<channel|> before the answer (Gemma 4)",
            template_markers=("<|channel>",),
        ),
        ReasoningParserSpec(
            name="kimi_k3",
            factory="missive.reasoning.xtml:KimiK3ThinkParser",
            description="Kimi-K3: the think element is reasoning, the response element the answer",
            template_markers=("open_tag('think'", "<|open|>think<|sep|>"),
        ),
    ]
