"""Default ``register_image_processors`` and ``register_document_processors``.

Installed plugins come before these, so a plugin that registers a processor
for ``application/pdf`` (say) replaces ``pypdf`` for PDFs. The office
processor is always registered; its libraries come with the ``office`` extra,
and without them an office document is a 400 naming the extra.
"""

from __future__ import annotations

from ..driver.media import IMAGE_MEDIA_TYPES
from ..kernel.hookspecs import hookimpl
from ..kernel.specs import DocumentProcessorSpec, ImageProcessorSpec
from ..media.documents import PDF_MEDIA_TYPE, TEXT_MEDIA_TYPES
from ..media.office import OFFICE_MEDIA_TYPES


@hookimpl
def register_image_processors() -> list[ImageProcessorSpec]:
    return [
        ImageProcessorSpec(
            name="pillow",
            factory="missive.media.images:PillowImageProcessor",
            media_types=IMAGE_MEDIA_TYPES,
            description=(
                "Checks the format by its bytes, decodes under a pixel limit, downscales and converts "
                "(Pillow)"
            ),
        ),
        ImageProcessorSpec(
            name="placeholder",
            factory="missive.media.images:PlaceholderImageProcessor",
            media_types=IMAGE_MEDIA_TYPES,
            description=(
                "Fallback for text-only models (media.image_fallback): a line of text naming the image"
            ),
        ),
    ]


@hookimpl
def register_document_processors() -> list[DocumentProcessorSpec]:
    return [
        DocumentProcessorSpec(
            name="pypdf",
            factory="missive.media.documents:PdfDocumentProcessor",
            media_types=(PDF_MEDIA_TYPE,),
            description="PDF text per page, with page markers (pypdf)",
        ),
        DocumentProcessorSpec(
            name="text",
            factory="missive.media.documents:TextDocumentProcessor",
            media_types=TEXT_MEDIA_TYPES,
            description="Plain text as UTF-8",
        ),
        DocumentProcessorSpec(
            name="office",
            factory="missive.media.office:OfficeDocumentProcessor",
            media_types=OFFICE_MEDIA_TYPES,
            description="docx, xlsx, pptx as text (the office extra: python-docx, openpyxl, python-pptx)",
        ),
    ]
