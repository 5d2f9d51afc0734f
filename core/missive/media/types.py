"""Moved to :mod:`missive.driver.media`; the name stays for plugins that import it."""

from __future__ import annotations

from ..driver.media import (
    IMAGE_MEDIA_TYPES,
    DocumentProcessor,
    ImageInput,
    ImageMarker,
    ImageProcessor,
    ImageTarget,
    Section,
    SourceBytes,
)

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
