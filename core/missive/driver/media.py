"""The shapes media processing passes around, and the processor interfaces.

Nothing here imports Pillow or pypdf: drivers import :class:`ImageInput` to
convert images, and plugins subclass :class:`ImageProcessor` or
:class:`DocumentProcessor` without paying for the heavy libraries.
"""

from __future__ import annotations

import abc
import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import MediaConfig

__all__ = [
    "IMAGE_MEDIA_TYPES",
    "ImageInput",
    "ImageMarker",
    "SourceBytes",
    "ImageTarget",
    "Section",
    "ImageProcessor",
    "DocumentProcessor",
]

#: The image media types of the Messages API (base64 sources accept exactly these).
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


@dataclass(frozen=True)
class ImageInput:
    """An image ready for a driver: checked, decoded once, within the model's
    size limit and in a format the model accepts.

    This is what a conversation's turns (and ``tool_result`` contents) hold in
    place of an ``image`` block once the core has processed it. Drivers turn
    it into their backend's shape (an OpenAI ``image_url`` data URI, Ollama's
    base64 ``images``...).

    Attributes:
        media_type: one of :data:`IMAGE_MEDIA_TYPES`, among the model's ``input_media``.
        data: the encoded image (the client's bytes when they needed no change).
        width, height: pixels of ``data``.
    """

    media_type: str
    data: bytes = field(repr=False)
    width: int
    height: int

    def base64(self) -> str:
        """``data`` as standard base64 (no line breaks)."""
        return base64.b64encode(self.data).decode("ascii")

    def data_uri(self) -> str:
        """``data:<media_type>;base64,<data>`` (RFC 2397)."""
        return f"data:{self.media_type};base64,{self.base64()}"


#: How a driver that embeds images itself marks an image's place in the
#: rendered prompt: called once per :class:`ImageInput` where it is rendered,
#: returns the text standing for it (llama.cpp's ``mtmd``: a marker the driver
#: then splits the prompt at). See :meth:`missive.messages.conversation.Turn.text`.
ImageMarker = Callable[[ImageInput], str]


@dataclass(frozen=True)
class SourceBytes:
    """The bytes of one image or document block, before processing.

    Attributes:
        data: the decoded base64 data or the fetched body.
        media_type: the declared (base64) or detected (url) media type.
        path: the source's field path for error messages (``messages.0.content.1.source``).
        url: the URL it was fetched from, for url sources.
    """

    data: bytes = field(repr=False)
    media_type: str
    path: str
    url: str | None = None


@dataclass(frozen=True)
class ImageTarget:
    """What the model takes, for an image processor.

    Attributes:
        accept: image media types the model accepts (empty: none, text only).
        max_edge: the longer side of the result, at most, in pixels.
        model: the configured model id (for messages).
    """

    accept: frozenset[str]
    max_edge: int
    model: str = ""


@dataclass(frozen=True)
class Section:
    """One part of a document's text: a PDF page, a sheet, a slide, or the
    whole content. Rendered as ``<tag attr="value">\\ntext\\n</tag>``.

    Attributes:
        tag: ``page``, ``sheet``, ``slide`` or ``content``.
        text: the extracted text.
        attrs: ``(name, value)`` pairs, e.g. ``(("number", "1"),)``.
    """

    tag: str
    text: str
    attrs: tuple[tuple[str, str], ...] = ()


class ImageProcessor(abc.ABC):
    """Turns the bytes of an image block into what a driver gets.

    Named by an :class:`~missive.kernel.specs.ImageProcessorSpec` factory and built
    once per app as ``cls(config)``. :meth:`process` is called in a worker
    thread (never on the event loop), so it may block.
    """

    def __init__(self, config: MediaConfig) -> None:
        self.config = config

    @abc.abstractmethod
    def process(self, image: SourceBytes, target: ImageTarget) -> ImageInput | str:
        """An :class:`ImageInput` the model accepts, or text standing for the
        image (a fallback for text-only models).

        Raises:
            MediaError: the image is corrupt, mislabeled or over a limit.
        """


class DocumentProcessor(abc.ABC):
    """Turns the bytes of a document block into text sections.

    Built and called like :class:`ImageProcessor` (``cls(config)``, then
    :meth:`process` in a worker thread).
    """

    def __init__(self, config: MediaConfig) -> None:
        self.config = config

    @abc.abstractmethod
    def process(self, document: SourceBytes) -> list[Section]:
        """The document's text, in order.

        Raises:
            MediaError: the document is corrupt, encrypted, mislabeled or over a limit.
        """
