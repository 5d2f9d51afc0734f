"""Images in the prompt: a multimodal projector (``mmproj`` GGUF) through libmtmd.

llama.cpp serves vision models as two files: the language model's GGUF and a
projector GGUF (``--mmproj`` in llama-server) holding the vision encoder and
the projection into the language model's embedding space. llama-cpp-python
0.3.36 ships libmtmd and its ctypes bindings (``llama_cpp.mtmd_cpp``); this
module uses them the way llama-server does (``tools/server``:
``process_mtmd_prompt``, ``mtmd_helper_eval_chunk_single``):

* the prompt is rendered with one marker text per image in its place (see
  :meth:`missive.messages.conversation.Turn.text`); a marker names the image's index
  and carries a random nonce fresh for each prompt, so client text can never
  forge one;
* text between markers is tokenized by the driver as before (client text as
  plain text, the template's as special tokens);
* each image is decoded with Pillow to RGB (alpha composited on white, GIF's
  first frame: the frame the API uses) and handed to ``mtmd_tokenize`` with a
  text holding only libmtmd's own marker; the result is the image's chunk plus
  whatever text tokens the projector wraps it in (Gemma 3's
  ``<start_of_image>``, slice separators...). ``mtmd_tokenize`` preprocesses
  the image (resize, tiles) but does not encode it, so counting stays cheap;
* an image chunk of ``n`` tokens takes ``n`` positions in the context. In the
  driver's token list those positions hold a synthetic id (negative, derived
  from the image's bytes), so the KV-cache prefix comparison of llama-cpp-python
  (and :mod:`missive_llamacpp.prefix`) reuses an image already in the cache
  and re-encodes one that changed;
* the chunk is encoded and decoded into the context by
  ``mtmd_helper_eval_chunk_single`` (it switches to non-causal attention for
  projectors that need it).

Projectors with M-RoPE positions (Qwen2-VL, Qwen2.5-VL, Qwen3-VL...) number an
image's positions differently from its tokens, which llama-cpp-python's
``Llama`` (one position per token) cannot track; they are refused at load
time with a message pointing at the ``llamaserver`` driver.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import logging
import re
import secrets
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from missive.api import ApiError, ConfigError, ImageInput, InvalidRequestError

from .child import run_child

__all__ = ["ImageSpan", "MediaPrompt", "Projector", "load_projector"]

log = logging.getLogger("missive.llamacpp")

#: The image media types the driver accepts: Pillow decodes all four of the
#: API's types, so none needs converting by the core.
VISION_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


@dataclass(frozen=True)
class ImageSpan:
    """One image chunk in a prompt: positions ``start .. start + n_tokens - 1``.

    Attributes:
        start: position (index in the prompt's token list) of its first token.
        n_tokens: positions it takes (``mtmd_input_chunk_get_n_tokens``).
        chunk: the ``mtmd_input_chunk *``, owned by the :class:`MediaPrompt`.
    """

    start: int
    n_tokens: int
    chunk: int

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


@dataclass
class MediaPrompt:
    """The image chunks of one prompt and the libmtmd objects that own them.

    Holds its ``mtmd_input_chunks`` alive; they are freed by :meth:`close`, or
    when the object is garbage collected.
    """

    spans: list[ImageSpan] = field(default_factory=list)
    _finalizers: list[Any] = field(default_factory=list, repr=False)

    def span_at(self, position: int) -> ImageSpan | None:
        """The image holding ``position`` (``start <= position < end``), or None."""
        for span in self.spans:
            if span.start <= position < span.end:
                return span
        return None

    def image_start(self, position: int) -> int:
        """``position``, moved back to its image's first position when it falls
        inside an image (an image is decoded whole or not at all)."""
        span = self.span_at(position)
        return span.start if span is not None and span.start < position else position

    def own(self, chunks: Any, free: Any) -> None:
        """Take ownership of ``chunks``: ``free(chunks)`` runs at :meth:`close`,
        or when this object is garbage collected."""
        self._finalizers.append(weakref.finalize(self, free, chunks))

    def close(self) -> None:
        """Free the chunks now (idempotent)."""
        for finalizer in self._finalizers:
            finalizer()
        self._finalizers.clear()


class Projector:
    """A loaded ``mmproj`` file for one language model.

    Built by :func:`load_projector`; used from the driver's tokenizing threads
    (:meth:`append_image`, as llama-server tokenizes in its HTTP threads) and
    from the model's generation thread (:meth:`decode`).
    """

    def __init__(self, ctx: int, mtmd: Any, path: Path) -> None:
        self._ctx = ctx
        self._mtmd = mtmd
        self.path = path
        self._default_marker = mtmd.mtmd_default_marker()
        self._lock = threading.Lock()

    # -- prompt markers ------------------------------------------------------

    @staticmethod
    def new_nonce() -> str:
        """A fresh nonce for one prompt's markers (a client never learns the
        next one, so no text it sends can stand for an image)."""
        return secrets.token_hex(8)

    @staticmethod
    def marker(index: int, nonce: str) -> str:
        """The text standing for image ``index`` in a prompt rendered with ``nonce``."""
        return f"<__missive_image_{nonce}_{index}__>"

    @staticmethod
    def split(text: str, nonce: str) -> Iterator[str | int]:
        """``text`` cut at the image markers of ``nonce``: text pieces
        (possibly empty) and image indexes, in order."""
        pos = 0
        for match in re.finditer(rf"<__missive_image_{nonce}_(\d+)__>", text):
            yield text[pos : match.start()]
            yield int(match.group(1))
            pos = match.end()
        yield text[pos:]

    # -- images --------------------------------------------------------------

    def append_image(self, image: ImageInput, tokens: list[int], media: MediaPrompt) -> None:
        """Append one image to a prompt being built: its positions to
        ``tokens`` (text tokens the projector wraps it in, and the image's
        synthetic id for each image position, see :func:`image_id`), its image
        chunks to ``media.spans`` (``media`` takes ownership of them).

        Raises:
            InvalidRequestError: the image cannot be decoded, or the projector's
                preprocessing refused it.
            ApiError: libmtmd failed otherwise.
        """
        mtmd = self._mtmd
        rgb, width, height = _rgb(image)
        buffer = (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb)
        bitmap = mtmd.mtmd_bitmap_init(width, height, buffer)
        if not bitmap:
            raise ApiError("libmtmd could not create an image bitmap")
        chunks = mtmd.mtmd_input_chunks_init()
        if not chunks:
            mtmd.mtmd_bitmap_free(bitmap)
            raise ApiError("libmtmd could not allocate input chunks")
        media.own(chunks, mtmd.mtmd_input_chunks_free)
        try:
            text = mtmd.mtmd_input_text()
            text.text = self._default_marker
            text.text_len = len(self._default_marker)
            text.add_special = False
            text.parse_special = True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
        finally:
            mtmd.mtmd_bitmap_free(bitmap)
        if rc == 2:
            raise InvalidRequestError(
                f"the model's vision projector could not preprocess a {width}x{height} image "
                "(libmtmd mtmd_tokenize: image preprocessing failed)"
            )
        if rc != 0:
            raise ApiError(f"libmtmd could not tokenize an image (mtmd_tokenize returned {rc})")
        synthetic = image_id(image)
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens.extend(int(ptr[j]) for j in range(n.value))
            elif kind == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                n_tokens = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
                media.spans.append(ImageSpan(start=len(tokens), n_tokens=n_tokens, chunk=int(chunk)))
                tokens.extend([synthetic] * n_tokens)
            else:
                raise ApiError(f"libmtmd returned an unexpected chunk type {kind} for an image")

    def decode(self, llm: Any, span: ImageSpan, seq_id: int = 0, n_batch: int | None = None) -> int:
        """Encode one image chunk and decode its embeddings into ``llm``'s
        context, sequence ``seq_id``, at positions ``span.start ..``
        (``n_batch`` embeddings per decode; default ``llm.n_batch``);
        returns the next position. Runs in the model's thread.

        Raises:
            ApiError: encoding or decoding failed (libmtmd's return code).
        """
        mtmd = self._mtmd
        import llama_cpp

        new_n_past = llama_cpp.llama_pos(0)
        rc = mtmd.mtmd_helper_eval_chunk_single(
            self._ctx,
            llm._ctx.ctx,
            span.chunk,
            llama_cpp.llama_pos(span.start),
            llama_cpp.llama_seq_id(seq_id),
            llm.n_batch if n_batch is None else n_batch,
            False,
            ctypes.byref(new_n_past),
        )
        if rc != 0:
            raise ApiError(
                "llama.cpp could not encode an image into the context (mtmd_helper_eval_chunk_single "
                f"returned {rc})"
            )
        return int(new_n_past.value)

    def close(self) -> None:
        """Free the libmtmd context (idempotent)."""
        with self._lock:
            ctx, self._ctx = self._ctx, 0
        if ctx:
            self._mtmd.mtmd_free(ctx)


def image_id(image: ImageInput) -> int:
    """The synthetic token id of an image's positions: negative (never a real
    token), from a SHA-256 of the image's bytes, so equal images compare equal
    in the KV-cache prefix and different ones (all but surely) do not."""
    digest = hashlib.sha256(image.data).digest()
    return -1 - int.from_bytes(digest[:4], "big") % (2**31 - 2)


def _rgb(image: ImageInput) -> tuple[bytes, int, int]:
    """The image as packed RGB bytes (``width * height * 3``), its width and
    height (:func:`missive.api.rgb_image`: upright, 8-bit, transparency on
    white, first frame).

    Raises:
        InvalidRequestError: Pillow cannot decode it.
    """
    from missive.api import rgb_image

    rgb = rgb_image(image)
    return rgb.tobytes(), rgb.width, rgb.height


# Kept alive for the life of the process: libmtmd holds the pointer.
_QUIET: Any = None


def _silence(mtmd: Any) -> None:
    """Route libmtmd's logging to nothing (it prints every load and encode to stderr)."""
    global _QUIET
    import llama_cpp

    if _QUIET is None:
        _QUIET = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
    mtmd.mtmd_log_set(_QUIET, None)
    mtmd.mtmd_helper_log_set(_QUIET, None)


#: Seconds the trial of a projector (:func:`probe_projector`) may take.
PROBE_TIMEOUT = 300


def probe_projector(model_path: Path, path: Path, *, model_id: str) -> None:
    """Try the projector in a child process before the server loads it.

    llama.cpp does not return errors for many malformed projector files: it
    aborts the whole process (``GGML_ASSERT``), at load or, worse, at the
    first image, which would kill a serving Missive and every request in
    flight. The child loads the model's vocabulary and hyperparameters only
    (``vocab_only``), the projector, and encodes two small images of
    different shapes; a failure there is a start-up error naming llama.cpp's
    own reason (:mod:`missive_llamacpp.child`). Costs one encode of the
    projector's image size (about a second for LLaVA 1.5 on a CPU).

    Raises:
        ConfigError: the child failed, or ran past :data:`PROBE_TIMEOUT`.
    """
    outcome = run_child("missive_llamacpp.vision", [str(model_path), str(path)], timeout=PROBE_TIMEOUT)
    if outcome.ok:
        return
    if outcome.returncode is None:
        raise ConfigError(
            f"model '{model_id}': trying the projector {path} took over {PROBE_TIMEOUT} s "
            "(settings.mmproj_path)"
        )
    raise ConfigError(
        f"model '{model_id}': the projector {path} (settings.mmproj_path) failed its trial "
        f"(load and encode of two small images in a child process): {outcome.reason()}"
    )


def _probe_main(model_path: str, path: str) -> int:
    """The child of :func:`probe_projector`; exit status 0 when the projector works."""
    import llama_cpp
    import llama_cpp.mtmd_cpp as mtmd

    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 1
    params.print_timings = False
    params.warmup = False
    ctx = mtmd.mtmd_init_from_file(path.encode(), llm.model, params)
    if not ctx:
        print(
            "probe: libmtmd could not load the projector (not an mmproj GGUF, or made for another model)",
            file=sys.stderr,
        )
        return 2
    projector = Projector(ctx, mtmd, Path(path))
    from PIL import Image

    for size in ((32, 24), (7, 300)):
        out = io.BytesIO()
        Image.new("RGB", size, (128, 64, 32)).save(out, format="PNG")
        media = MediaPrompt()
        tokens: list[int] = []
        projector.append_image(ImageInput("image/png", out.getvalue(), *size), tokens, media)
        for span in media.spans:
            rc = mtmd.mtmd_encode_chunk(ctx, span.chunk)
            if rc != 0:
                print(
                    f"probe: encoding a {size[0]}x{size[1]} image failed (mtmd_encode_chunk returned {rc})",
                    file=sys.stderr,
                )
                return 3
        media.close()
    projector.close()
    return 0


def load_projector(
    llm: Any, model_path: Path, path: Path, *, model_id: str, threads: int, use_gpu: bool, verbose: bool
) -> Projector:
    """Load ``path`` (an mmproj GGUF) for the loaded model ``llm`` (from
    ``model_path``), after :func:`probe_projector` has tried it.

    Raises:
        ConfigError: the file is missing or not a projector libmtmd can load
            (wrong file, or made for another model: libmtmd checks the
            projection size against the model's embedding size), makes
            llama.cpp abort (the probe), has no vision encoder, or uses M-RoPE
            positions (see module doc).
    """
    if not path.is_file():
        raise ConfigError(f"model '{model_id}': projector file not found: {path} (settings.mmproj_path)")
    probe_projector(model_path, path, model_id=model_id)
    import llama_cpp.mtmd_cpp as mtmd

    if not verbose:
        _silence(mtmd)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = use_gpu
    params.n_threads = threads
    params.print_timings = verbose
    ctx = mtmd.mtmd_init_from_file(str(path).encode(), llm.model, params)
    if not ctx:
        raise ConfigError(
            f"model '{model_id}': libmtmd could not load the projector {path} (settings.mmproj_path): "
            "not an mmproj GGUF, or made for another model (set verbose = true for llama.cpp's reason)"
        )
    projector = Projector(ctx, mtmd, path)
    if not mtmd.mtmd_support_vision(ctx):
        projector.close()
        raise ConfigError(
            f"model '{model_id}': the projector {path} has no vision encoder (audio-only projectors are not "
            "supported)"
        )
    if mtmd.mtmd_decode_use_mrope(ctx):
        projector.close()
        raise ConfigError(
            f"model '{model_id}': the projector {path} uses M-RoPE positions (Qwen2-VL family), which "
            "the in-process llamacpp driver cannot track; serve this model with llama-server and the "
            "llamaserver driver"
        )
    return projector


if __name__ == "__main__":  # the child of probe_projector
    sys.exit(_probe_main(sys.argv[1], sys.argv[2]))
