"""Images: recognizing the format by its bytes, decoding under limits,
downscaling and converting for the model (Pillow).

Rules (the Messages API's image rules, "Vision" page, where it has them):

* the format is read from the first bytes (magic numbers: JPEG ``FF D8 FF``,
  PNG ``89 50 4E 47 0D 0A 1A 0A``, GIF ``GIF87a``/``GIF89a``, WebP
  ``RIFF....WEBP``); a base64 source whose declared ``media_type`` differs is
  refused, as the API refuses it;
* Pillow opens the image restricted to that one format, and the size is
  read from the header **before** any pixel is decoded: a side over
  ``media.image_max_side`` (the API's 8000) or ``width x height`` over
  ``media.image_max_pixels`` is refused, so a decompression bomb (a small
  file that decodes to gigabytes) never allocates;
* a truncated or corrupt image is refused when decoding fails;
* an image whose format the model accepts and whose longer side is within
  the limit is passed on byte for byte (prompt caching relies on stable
  bytes); otherwise it is decoded (the first frame of an animation),
  downscaled so the longer side fits (Lanczos, aspect kept) and encoded as
  the source format if the model accepts it, else PNG, else JPEG
  (quality 90, alpha flattened onto white), else another accepted format.
"""

from __future__ import annotations

import io
import warnings
from typing import TYPE_CHECKING, Any

from ..driver.media import IMAGE_MEDIA_TYPES, ImageInput, ImageProcessor, ImageTarget, SourceBytes
from ..protocol.errors import MediaError

if TYPE_CHECKING:  # Pillow is imported when an image is decoded, not with this module
    from PIL.Image import Image as PillowImage
    from PIL.Image import Resampling

__all__ = [
    "rgb_image",
    "sniff_image",
    "image_size",
    "prepare_image",
    "upright",
    "to_8bit",
    "PillowImageProcessor",
    "PlaceholderImageProcessor",
]

_PIL_FORMATS = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}
_NAMES = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WebP"}


def sniff_image(data: bytes) -> str | None:
    """The image media type of ``data`` from its magic number, or None when it
    is none of JPEG, PNG, GIF, WebP."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _open(data: bytes, media_type: str, path: str) -> PillowImage:
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data), formats=[_PIL_FORMATS[media_type]])
        except Image.DecompressionBombError as exc:
            raise MediaError(path, f"image refused as a decompression bomb ({exc})") from None
        except UnidentifiedImageError:
            raise MediaError(
                path, f"the {_NAMES[media_type]} image is truncated or corrupt (its header cannot be read)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any decoder failure is the client's file
            raise MediaError(
                path, f"the {_NAMES[media_type]} image cannot be read ({type(exc).__name__}: {exc})"
            ) from None


def image_size(image: SourceBytes, *, max_side: int, max_pixels: int) -> tuple[int, int]:
    """``(width, height)`` of ``image`` from its header, checked against the limits.

    Raises:
        MediaError: not a JPEG, PNG, GIF or WebP; mislabeled; a bad header;
            a side over ``max_side`` or an area over ``max_pixels``.
    """
    media_type = _check_format(image)
    img = _open(image.data, media_type, image.path)
    with img:
        return _check_size(img.size, image.path, max_side=max_side, max_pixels=max_pixels)


def _check_format(image: SourceBytes) -> str:
    actual = sniff_image(image.data)
    if actual is None:
        what = "fetched file" if image.url else "data"
        raise MediaError(
            image.path,
            f"the {what} is not a JPEG, PNG, GIF or WebP image (its first bytes match none of them)",
        )
    if image.url is None and actual != image.media_type:
        raise MediaError(
            image.path,
            f"the image was declared as {image.media_type}, but its bytes are {actual}",
        )
    return actual


def _check_size(size: tuple[int, int], path: str, *, max_side: int, max_pixels: int) -> tuple[int, int]:
    width, height = size
    if width < 1 or height < 1:
        raise MediaError(path, f"the image has no pixels ({width}x{height})")
    if max(width, height) > max_side:
        raise MediaError(
            path, f"image dimensions {width}x{height} exceed the maximum of {max_side} pixels a side"
        )
    if width * height > max_pixels:
        raise MediaError(
            path, f"image of {width}x{height} = {width * height} pixels exceeds the limit of {max_pixels}"
        )
    return width, height


def _output_format(source: str, accept: frozenset[str]) -> str:
    for candidate in (source, "image/png", "image/jpeg", "image/webp", "image/gif"):
        if candidate in accept:
            return candidate
    raise ValueError("no accepted image format")  # the pipeline never calls without one


def _encode(img: PillowImage, media_type: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    if media_type == "image/jpeg":
        if img.mode in ("RGBA", "LA", "P", "PA") or "transparency" in img.info:
            rgba = img.convert("RGBA")
            flat = Image.new("RGB", rgba.size, (255, 255, 255))
            flat.paste(rgba, mask=rgba.getchannel("A"))
            img = flat
        elif img.mode not in ("RGB", "L"):
            img = img.convert("RGB")
        img.save(out, format="JPEG", quality=90)
    elif media_type == "image/png":
        if img.mode not in ("1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"):
            img = img.convert("RGBA" if "A" in img.mode else "RGB")
        img.save(out, format="PNG", optimize=False)
    elif media_type == "image/gif":
        img.convert("RGBA" if "A" in img.mode else "RGB").save(out, format="GIF")
    else:
        if img.mode not in ("RGB", "RGBA"):
            img = img.convert("RGBA" if "A" in img.mode or img.mode == "P" else "RGB")
        img.save(out, format="WEBP", quality=90)
    return out.getvalue()


def prepare_image(image: SourceBytes, target: ImageTarget, *, max_side: int, max_pixels: int) -> ImageInput:
    """Check, decode and fit ``image`` for ``target`` (rules in the module doc).

    Args:
        image: the block's bytes; ``media_type`` is the declared type for
            base64 sources (checked against the bytes), ignored for URLs.
        target: the accepted formats (at least one) and the longest side.
        max_side, max_pixels: the refusal limits (``media.image_max_side``,
            ``media.image_max_pixels``).

    Raises:
        MediaError: unknown or mislabeled format, over a limit, truncated or corrupt.
    """
    decoded = [0]  # pixels of the image, once its header is read
    try:
        return _prepare(image, target, max_side=max_side, max_pixels=max_pixels, decoded=decoded)
    finally:
        if decoded[0] * 4 >= _TRIM_AFTER_BYTES:  # RGBA bytes
            _release_memory()


def _prepare(
    image: SourceBytes, target: ImageTarget, *, max_side: int, max_pixels: int, decoded: list[int]
) -> ImageInput:
    media_type = _check_format(image)
    img = _open(image.data, media_type, image.path)
    # Everything happens inside ``with``: closing destroys the decoded pixels.
    # One full-size copy at most (a 2.5 KB lossless WebP can hold 8000 x 8000
    # RGBA pixels, 256 MB): a still image is fitted in place, and a JPEG is
    # decoded at a reduced scale right away (``draft``, DCT scaling) when it
    # is to be downscaled.
    with img:
        width, height = _check_size(img.size, image.path, max_side=max_side, max_pixels=max_pixels)
        decoded[0] = width * height
        frames = getattr(img, "n_frames", 1)
        fits = max(width, height) <= target.max_edge
        try:
            img.seek(0)
            if not fits and media_type == "image/jpeg":
                img.draft(img.mode, (target.max_edge, target.max_edge))
            img.load()
        except Exception as exc:  # noqa: BLE001 - truncated data, bad chunks, decoder errors
            raise MediaError(
                image.path, f"the {_NAMES[media_type]} image cannot be decoded (truncated or corrupt: {exc})"
            ) from None
        # EXIF orientation (phone photos): the pixels are turned upright here,
        # since backends differ in whether they read it.
        orientation = (
            img.getexif().get(_ORIENTATION, 1)
            if media_type in ("image/jpeg", "image/webp", "image/png")
            else 1
        )
        turned = isinstance(orientation, int) and 2 <= orientation <= 8
        if fits and frames == 1 and media_type in target.accept and not turned:
            return ImageInput(media_type=media_type, data=image.data, width=width, height=height)
        frame = img.copy() if frames > 1 else img  # the first frame, apart from the animation
        if turned:
            frame = upright(frame)
        # 16-bit grey: Pillow cannot reduce it (thumbnail), and models read 8 bits.
        frame = to_8bit(frame)
        if max(frame.size) > target.max_edge:
            frame.thumbnail((target.max_edge, target.max_edge), resample=_lanczos())
        out_type = _output_format(media_type, target.accept)
        data = _encode(frame, out_type)
        return ImageInput(media_type=out_type, data=data, width=frame.width, height=frame.height)


_ORIENTATION = 0x0112  # the EXIF tag

#: Decoded images from this many bytes up make the process give freed memory
#: back to the system (see :func:`_release_memory`).
_TRIM_AFTER_BYTES = 64 * 2**20
_trim: Any = None


def _release_memory() -> None:
    """Give freed heap back to the system after a large image.

    Images are decoded in worker threads, and glibc keeps what a thread's
    arena freed: one 8000 x 8000 WebP (2.5 KB sent) left about 1 GB resident
    after four were fitted at once. ``malloc_trim(0)`` returns it (measured:
    1096 MB -> 23 MB). Called only after an image of
    :data:`_TRIM_AFTER_BYTES` or more decoded, so small images cost nothing;
    a no-op where libc has no ``malloc_trim`` (musl, macOS).
    """
    global _trim
    if _trim is None:
        import ctypes
        import ctypes.util

        try:
            _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _trim = False
    if _trim:
        _trim(0)


def upright(img: PillowImage) -> PillowImage:
    """``img`` (a Pillow image) turned upright by its EXIF orientation (tag
    dropped); unchanged without one, or when the EXIF data is malformed."""
    from PIL import ImageOps

    try:
        return ImageOps.exif_transpose(img)
    except Exception:  # noqa: BLE001 - malformed EXIF: the pixels as stored
        return img


def to_8bit(img: PillowImage) -> PillowImage:
    """``img`` (a Pillow image) with 16-bit or 32-bit grey samples (modes
    ``I;16*``, ``I``: 16-bit PNGs) as 8-bit grey (``L``), levels kept (a plain
    ``convert`` clips everything above 255 to white); other modes unchanged."""
    if not (img.mode.startswith("I;16") or img.mode == "I"):
        return img
    return img.convert("I").point(lambda v: v * (1 / 256)).convert("L")


def rgb_image(image: ImageInput) -> PillowImage:
    """An image as a model's vision encoder takes it: an RGB Pillow image,
    upright by its EXIF orientation (phone photos), 16-bit samples scaled to
    8 bits (:func:`to_8bit`), transparency composited on white, an
    animation's first frame. Shared by the drivers that read pixels
    (llama.cpp's libmtmd, mlx-vlm).

    Raises:
        InvalidRequestError: Pillow cannot decode it (the core has checked it
            already, so this is rare: a truncated frame...).
    """
    from PIL import Image, UnidentifiedImageError

    from ..protocol.errors import InvalidRequestError

    try:
        with Image.open(io.BytesIO(image.data)) as opened:
            opened.seek(0)
            img = to_8bit(upright(opened))
            if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
                rgba = img.convert("RGBA")
                background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                return Image.alpha_composite(background, rgba).convert("RGB")
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InvalidRequestError(f"an image could not be decoded for the model: {exc}") from exc


def _lanczos() -> Resampling:
    from PIL import Image

    return Image.Resampling.LANCZOS


class PillowImageProcessor(ImageProcessor):
    """The default image processor (``pillow``): :func:`prepare_image` with
    the ``[media]`` limits."""

    def process(self, image: SourceBytes, target: ImageTarget) -> ImageInput:
        return prepare_image(
            image, target, max_side=self.config.image_max_side, max_pixels=self.config.image_max_pixels
        )


class PlaceholderImageProcessor(ImageProcessor):
    """A fallback for text-only models (``placeholder``): the image becomes a
    line of text saying what it was, after the same format and size checks.

    ``[image: image/png, 640x480 pixels; not shown: model 'x' reads text only]``
    """

    def process(self, image: SourceBytes, target: ImageTarget) -> str:
        width, height = image_size(
            image, max_side=self.config.image_max_side, max_pixels=self.config.image_max_pixels
        )
        media_type = sniff_image(image.data)
        return (
            f"[image: {media_type}, {width}x{height} pixels; not shown: model '{target.model}' reads text "
            "only]"
        )


assert set(_PIL_FORMATS) == set(IMAGE_MEDIA_TYPES)
