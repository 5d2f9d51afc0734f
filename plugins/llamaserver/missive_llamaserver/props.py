"""What a llama-server says about itself: ``GET /props`` and ``GET /v1/models``.

``/props`` (``get_res_props`` in ``tools/server/server-context.cpp``;
README "GET /props"): ``default_generation_settings.n_ctx`` (the context of
one slot: what one request may use), ``total_slots``, ``chat_template``,
``chat_template_caps`` (``supports_tools``, ``supports_tool_calls``, ...,
from the template analyser), ``modalities.vision``, ``build_info``
(``b<number>-<commit>``), ``model_alias``, ``model_path``. ik_llama.cpp's
``/props`` has the same ``default_generation_settings`` and a top-level
``n_ctx`` (the whole context) but no ``chat_template_caps`` or
``build_info``; it names itself in the ``Server: ik_llama.cpp`` response
header (mainline: ``Server: llama.cpp``).

``/v1/models``: ``data[0].meta.n_ctx`` (the slot context), ``n_ctx_train``,
``n_vocab``, ``n_params`` in mainline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ServerInfo", "parse_props", "context_from_models"]


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class ServerInfo:
    """Parsed ``/props`` of one replica.

    Attributes:
        n_ctx: tokens of context one request may use (the slot context), None if not stated.
        total_slots: requests the server generates at once (``--parallel``).
        chat_template: the Jinja source of the model's chat template ("" if none).
        template_caps: ``chat_template_caps`` (empty for ik_llama.cpp and older builds).
        vision: the server loaded a multimodal projector (``--mmproj``).
        build: ``build_info`` ("" if absent).
        fork: ``"ik_llama.cpp"`` or ``"llama.cpp"`` (from the ``Server`` header).
    """

    n_ctx: int | None
    total_slots: int | None = None
    chat_template: str = ""
    template_caps: dict[str, bool] = field(default_factory=dict)
    vision: bool = False
    build: str = ""
    fork: str = "llama.cpp"


def parse_props(props: Any, server_header: str | None = None) -> ServerInfo:
    """A :class:`ServerInfo` from a ``/props`` answer and the ``Server`` header.

    Unknown or missing fields are left at their defaults (older builds lack
    several); a non-object answer gives an empty :class:`ServerInfo`.
    """
    if not isinstance(props, dict):
        return ServerInfo(n_ctx=None)
    settings = props.get("default_generation_settings")
    slot_ctx = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    caps = props.get("chat_template_caps")
    modalities = props.get("modalities")
    fork = "ik_llama.cpp" if server_header and "ik_llama" in server_header else "llama.cpp"
    return ServerInfo(
        n_ctx=slot_ctx or _positive_int(props.get("n_ctx")),
        total_slots=_positive_int(props.get("total_slots")),
        chat_template=props.get("chat_template") if isinstance(props.get("chat_template"), str) else "",
        template_caps={k: v for k, v in caps.items() if isinstance(v, bool)}
        if isinstance(caps, dict)
        else {},
        vision=bool(modalities.get("vision")) if isinstance(modalities, dict) else False,
        build=props.get("build_info") if isinstance(props.get("build_info"), str) else "",
        fork=fork,
    )


def context_from_models(models: Any) -> int | None:
    """``data[0].meta.n_ctx`` of a ``/v1/models`` answer, if stated."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return None
    meta = data[0].get("meta")
    return _positive_int(meta.get("n_ctx")) if isinstance(meta, dict) else None
