"""The metadata of a GGUF file: what ``missive models`` lists and the
defaults ``missive serve --model`` chooses.

Reads the header's key/value section only (format: ggml's ``docs/gguf.md``,
versions 2 and 3, either byte order), through a memory map, skipping arrays
by their length: the tokenizer's vocabulary (up to a few hundred thousand
strings) is never decoded. The ``gguf`` package's ``GGUFReader`` parses every
field into numpy views instead (2 s for the 49,152-token SmolLM2 file, more
for larger vocabularies), which a listing of several models cannot afford.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GGUFInfo", "GGUFError", "read_gguf", "read_tensors", "FILE_TYPES", "template_family"]

MAGIC = b"GGUF"

#: ``general.file_type`` (llama.cpp's ``enum llama_ftype``, include/llama.h)
#: -> the quantization name used in file names. Gaps are removed types.
FILE_TYPES: dict[int, str] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
}

# Value types: (struct code, size) of the scalars; 8 string, 9 array.
_SCALARS = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
_STRING, _ARRAY = 8, 9

#: Chat template families by a literal only that family's templates contain,
#: first match wins (harmony templates also contain ChatML-like markers).
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("<|channel|>", "harmony"),
    ("<|start_header_id|>", "llama3"),
    ("<|START_OF_TURN_TOKEN|>", "command-r"),
    ("<|start_of_role|>", "granite"),
    ("<seed:bos>", "seed"),
    ("<|im_user|>", "kimi"),
    ("<\uff5cUser\uff5c>", "deepseek"),
    ("[gMASK]", "glm"),
    ("<start_of_turn>", "gemma"),
    ("<|im_start|>", "chatml"),
    ("[INST]", "mistral"),
    ("<|user|>", "phi"),
)


class GGUFError(Exception):
    """Not a GGUF file, or one whose header is cut short or malformed."""


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF header says about its model.

    Attributes:
        path: the file.
        size: bytes of the file (of every part, for a split model).
        architecture: ``general.architecture`` (``llama``, ``qwen3``...).
        name: ``general.name``, or None.
        size_label: ``general.size_label`` (``135M``, ``4B``), or None.
        quantization: the ``general.file_type`` name (``Q4_K_M``), or None.
        context_length: ``{architecture}.context_length``, the training
            context in tokens, or None.
        chat_template: ``tokenizer.chat_template`` (Jinja source), or None.
        split_count: ``split.count`` of a split model (1 otherwise).
        metadata: every scalar and string key (arrays left out).
    """

    path: Path
    size: int
    architecture: str | None
    name: str | None
    size_label: str | None
    quantization: str | None
    context_length: int | None
    chat_template: str | None
    split_count: int
    metadata: dict[str, Any]

    @property
    def template_family(self) -> str:
        """The chat template's family (:func:`template_family`)."""
        return template_family(self.chat_template)


def template_family(template: str | None) -> str:
    """The family of a chat template (``chatml``, ``llama3``, ``harmony``,
    ``gemma``, ``mistral``...) by the literal markers its source contains;
    ``"none"`` without a template, ``"other"`` when no marker matches."""
    if not template:
        return "none"
    return next((family for marker, family in _FAMILIES if marker in template), "other")


class _Cursor:
    def __init__(self, data: Any, order: str) -> None:
        self.data, self.order, self.pos = data, order, 0

    def take(self, code: str, size: int) -> Any:
        end = self.pos + size
        if end > len(self.data):
            raise GGUFError("header cut short")
        (value,) = struct.unpack_from(self.order + code, self.data, self.pos)
        self.pos = end
        return value

    def string(self, keep: bool = True) -> str | None:
        length = self.take("Q", 8)
        end = self.pos + length
        if end > len(self.data):
            raise GGUFError("header cut short")
        raw = self.data[self.pos : end] if keep else None
        self.pos = end
        return None if raw is None else bytes(raw).decode("utf-8", errors="replace")

    def skip_array(self) -> None:
        kind, count = self.take("I", 4), self.take("Q", 8)
        if kind == _STRING:
            for _ in range(count):
                self.string(keep=False)
        elif kind in _SCALARS:
            self.pos += _SCALARS[kind][1] * count
            if self.pos > len(self.data):
                raise GGUFError("header cut short")
        else:  # nested arrays are not used by any writer; refuse rather than guess
            raise GGUFError(f"unsupported array element type {kind}")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            code, size = _SCALARS[kind]
            return self.take(code, size)
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            self.skip_array()
            return None
        raise GGUFError(f"unknown value type {kind}")


def _metadata(data: Any, cursor_out: list[_Cursor] | None = None) -> dict[str, Any]:
    if bytes(data[:4]) != MAGIC:
        raise GGUFError("not a GGUF file (no GGUF magic)")
    order = "<"
    (version,) = struct.unpack_from("<I", data, 4)
    if version > 0xFFFF:  # written big-endian
        order = ">"
        (version,) = struct.unpack_from(">I", data, 4)
    if version not in (2, 3):
        raise GGUFError(f"unsupported GGUF version {version}")
    cursor = _Cursor(data, order)
    cursor.pos = 8
    cursor.take("Q", 8)  # tensor count
    count = cursor.take("Q", 8)
    out: dict[str, Any] = {}
    for _ in range(count):
        key = cursor.string() or ""
        value = cursor.value(cursor.take("I", 4))
        if value is not None:
            out[key] = value
    if cursor_out is not None:
        cursor_out.append(cursor)
    return out


def _tensors(data: Any, size: int) -> dict[str, int]:
    """Each tensor's name and bytes, from the tensor infos after the
    key/value section (``docs/gguf.md``: name, dimensions, type, offset into
    the data section, which starts at the next ``general.alignment``
    boundary, 32 by default). A tensor's bytes are the distance to the next
    tensor's offset (the last: to the end of the file), padding included:
    this needs no table of the quantization types' block sizes."""
    cursors: list[_Cursor] = []
    meta = _metadata(data, cursors)
    cursor = cursors[0]
    (count,) = struct.unpack_from(cursor.order + "Q", data, 8)
    offsets: list[tuple[int, str]] = []
    for _ in range(count):
        name = cursor.string() or ""
        dims = cursor.take("I", 4)
        cursor.pos += 8 * dims
        cursor.take("I", 4)  # the ggml type
        offsets.append((cursor.take("Q", 8), name))
    alignment = int(meta.get("general.alignment") or 32)
    start = -(-cursor.pos // alignment) * alignment
    offsets.sort()
    ends = [offset for offset, _ in offsets[1:]] + [size - start]
    return {name: end - offset for (offset, name), end in zip(offsets, ends, strict=True)}


def read_tensors(path: str | Path) -> dict[str, int]:
    """Each tensor of the GGUF model at ``path`` (every part of a split
    model) and its bytes (:func:`_tensors`); nothing of the weights is read.

    Raises:
        GGUFError: not a GGUF file, or a malformed header.
        OSError: a file cannot be read.
    """
    path = Path(path)
    split = int(read_gguf(path).split_count)
    found: dict[str, int] = {}
    for part in split_parts(path, split) if split > 1 else [path]:
        with open(part, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                with memoryview(data) as view:
                    found.update(_tensors(view, part.stat().st_size))
            except (GGUFError, struct.error) as exc:
                raise GGUFError(f"{part}: {exc}") from None
    return found


def read_gguf(path: str | Path) -> GGUFInfo:
    """The metadata of the GGUF file at ``path`` (the first part of a split
    model: its siblings ``-0000N-of-0000M.gguf`` are added to ``size``).

    Raises:
        GGUFError: not a GGUF file, or a malformed header.
        OSError: the file cannot be read.
    """
    path = Path(path)
    with open(path, "rb") as f:
        size = path.stat().st_size
        if size < 24:
            raise GGUFError(f"{path}: not a GGUF file (too short)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                with memoryview(data) as view:
                    meta = _metadata(view)
            except (GGUFError, struct.error) as exc:
                raise GGUFError(f"{path}: {exc}") from None
    split = int(meta.get("split.count") or 1)
    if split > 1:
        size = sum(p.stat().st_size for p in split_parts(path, split) if p.is_file())
    arch = meta.get("general.architecture")
    file_type = meta.get("general.file_type")
    context = meta.get(f"{arch}.context_length") if arch else None
    return GGUFInfo(
        path=path,
        size=size,
        architecture=arch,
        name=meta.get("general.name"),
        size_label=meta.get("general.size_label"),
        quantization=FILE_TYPES.get(file_type) if isinstance(file_type, int) else None,
        context_length=int(context) if isinstance(context, int) else None,
        chat_template=meta.get("tokenizer.chat_template"),
        split_count=split,
        metadata=meta,
    )


def split_parts(first: Path, count: int) -> list[Path]:
    """The files of a split GGUF model (llama.cpp's ``gguf-split`` naming,
    ``NAME-00001-of-00003.gguf``), given its first part."""
    stem = first.name
    marker = "-00001-of-"
    if marker not in stem:
        return [first]
    head = stem.split(marker, 1)[0]
    return [first.with_name(f"{head}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
