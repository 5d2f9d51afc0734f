"""A tiny random-weight LLaVA-1.5 style multimodal projector ("mmproj") GGUF.

Test fixture: ``write_tiny_mmproj`` writes a ``clip`` GGUF of projector type
``mlp`` (a CLIP-like ViT vision tower followed by the 2-layer MLP ``mm.0`` /
``mm.2``) that llama.cpp's libmtmd loads next to a text model whose embedding
size is ``n_embd_text``. The weights are random (numpy, seeded), so the output
is meaningless, but it drives the whole in-process vision path (projector
load, image preprocessing and encode, image embeddings decoded into the text
context) on CPU without downloading a real projector.

The metadata keys and tensor names mirror what llama.cpp's legacy LLaVA-1.5
converter (``tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py``)
writes and what ``tools/mtmd/clip.cpp`` reads (llama.cpp as vendored in
llama-cpp-python 0.3.36). Needs the ``gguf`` package (llama.cpp's GGUF writer).

Layout notes (see clip.cpp / models/llava.cpp):

* ``clip.vision.block_count`` blocks are loaded, but the LLaVA graph runs only
  the first ``block_count - 1`` (it takes the second-to-last layer's features),
  so two blocks are written and one of them is actually evaluated.
* No ``v.post_ln`` (the LLaVA converter drops CLIP's post-layernorm).
* The vision FFN uses the correct ``ffn_up`` (fc1) / ``ffn_down`` (fc2) names;
  clip.cpp's "swapped up/down" fix-up only triggers when ``ffn_down`` has the
  vision width as its input dimension, which is not the case here.
* The projector's hidden width (``mm.0`` output) is kept small instead of
  ``n_embd_text`` as in the real LLaVA-1.5 (4096); llama.cpp reads the output
  width from ``mm.2.weight`` (it must equal the text model's ``n_embd``).
* Every image is resized/padded to ``image_size`` squared by libmtmd, so each
  image becomes ``(image_size // patch_size) ** 2`` embeddings.
"""

from __future__ import annotations

import pathlib

import numpy as np

# Tiny vision tower dimensions.
_N_EMBD = 32
_N_HEAD = 4
_N_FF = 64
_N_LAYER = 2
_MM_HIDDEN = 64
_LN_EPS = 1e-5

# CLIP's (OpenAI) preprocessing constants, as in LLaVA-1.5.
_IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
_IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]


def write_tiny_mmproj(
    path: pathlib.Path,
    *,
    n_embd_text: int,
    image_size: int = 64,
    patch_size: int = 16,
    seed: int = 0,
    declared_image_size: int | None = None,
    projector_type: str = "mlp",
) -> None:
    """Write a tiny random ``mlp`` (LLaVA-1.5 style) mmproj GGUF to ``path``.

    ``n_embd_text`` must be the embedding size of the text model it is paired
    with (libmtmd refuses a mismatch). The bytes depend only on the arguments.
    ``declared_image_size`` and ``projector_type`` write metadata that
    disagrees with the tensors: a broken file llama.cpp loads and then aborts
    on (for the tests of the driver's trial of a projector).
    """
    import gguf  # llama.cpp's GGUF writer (PyPI: gguf)

    if n_embd_text <= 0:
        raise ValueError(f"n_embd_text must be positive, got {n_embd_text}")
    if patch_size <= 0 or image_size <= 0 or image_size % patch_size:
        raise ValueError(
            f"image_size ({image_size}) must be a positive multiple of patch_size ({patch_size})"
        )

    rng = np.random.default_rng(seed)
    n_patches = (image_size // patch_size) ** 2
    n_pos = n_patches + 1  # + class embedding

    def weight(*shape: int) -> np.ndarray:
        # numpy shape is (out, in); the GGUF/ggml shape is reversed.
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    def bias(n: int) -> np.ndarray:
        return (rng.standard_normal(n) * 0.02).astype(np.float32)

    def norm(n: int) -> tuple[np.ndarray, np.ndarray]:
        w = (1.0 + rng.standard_normal(n) * 0.02).astype(np.float32)
        return w, bias(n)

    tensors: list[tuple[str, np.ndarray]] = []

    # Embeddings (patch conv kernel is always f16 in the converter).
    tensors.append(("v.class_embd", (rng.standard_normal(_N_EMBD) * 0.02).astype(np.float32)))
    tensors.append(("v.patch_embd.weight", weight(_N_EMBD, 3, patch_size, patch_size)))
    tensors.append(("v.position_embd.weight", weight(n_pos, _N_EMBD)))
    ln_w, ln_b = norm(_N_EMBD)
    tensors.append(("v.pre_ln.weight", ln_w))
    tensors.append(("v.pre_ln.bias", ln_b))

    # Transformer blocks.
    for il in range(_N_LAYER):
        p = f"v.blk.{il}"
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors.append((f"{p}.{proj}.weight", weight(_N_EMBD, _N_EMBD)))
            tensors.append((f"{p}.{proj}.bias", bias(_N_EMBD)))
        for ln in ("ln1", "ln2"):
            ln_w, ln_b = norm(_N_EMBD)
            tensors.append((f"{p}.{ln}.weight", ln_w))
            tensors.append((f"{p}.{ln}.bias", ln_b))
        tensors.append((f"{p}.ffn_up.weight", weight(_N_FF, _N_EMBD)))
        tensors.append((f"{p}.ffn_up.bias", bias(_N_FF)))
        tensors.append((f"{p}.ffn_down.weight", weight(_N_EMBD, _N_FF)))
        tensors.append((f"{p}.ffn_down.bias", bias(_N_EMBD)))

    # LLaVA MLP projector: Linear -> GELU -> Linear.
    tensors.append(("mm.0.weight", weight(_MM_HIDDEN, _N_EMBD)))
    tensors.append(("mm.0.bias", bias(_MM_HIDDEN)))
    tensors.append(("mm.2.weight", weight(n_embd_text, _MM_HIDDEN)))
    tensors.append(("mm.2.bias", bias(n_embd_text)))

    writer = gguf.GGUFWriter(path=None, arch="clip")  # general.architecture = "clip"
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name("tiny-random-llava-mmproj")
    writer.add_description("image encoder for LLaVA (tiny random test fixture)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_bool("clip.has_text_encoder", False)
    writer.add_clip_has_vision_encoder(True)
    writer.add_bool("clip.has_llava_projector", True)
    writer.add_clip_projector_type(projector_type)
    writer.add_vision_image_size(image_size if declared_image_size is None else declared_image_size)
    writer.add_vision_patch_size(patch_size)
    writer.add_vision_embedding_length(_N_EMBD)
    writer.add_vision_feed_forward_length(_N_FF)
    writer.add_vision_projection_dim(n_embd_text)
    writer.add_vision_head_count(_N_HEAD)
    writer.add_vision_attention_layernorm_eps(_LN_EPS)
    writer.add_vision_block_count(_N_LAYER)
    writer.add_vision_image_mean(_IMAGE_MEAN)
    writer.add_vision_image_std(_IMAGE_STD)
    writer.add_vision_use_gelu(False)  # CLIP's quick_gelu

    for name, data in tensors:
        writer.add_tensor(name, data)

    writer.write_header_to_file(path=pathlib.Path(path))
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
