"""Documents as text: PDFs (pypdf), plain text, and rendering with title and context.

Drivers never see a document block: the core turns each one into one text
block (:func:`render_document`)::

    <document>
    <title>Q3 report</title>
    <context>Prepared by finance</context>
    <page number="1">
    ...text of page 1...
    </page>
    <page number="2">
    ...
    </page>
    </document>

``title`` and ``context`` appear only when the block has them; text and
``content`` documents have one ``<content>`` section instead of pages;
office files have ``<sheet name="...">`` and ``<slide number="...">``.

PDF rules (:class:`PdfDocumentProcessor`):

* the bytes must start with ``%PDF-`` (within the first 1024 bytes, as
  readers allow), else the block is refused as mislabeled;
* an encrypted PDF is read only when the empty user password opens it (an
  owner password alone restricts printing or copying, not reading);
  otherwise it is refused, as is one whose encryption pypdf cannot handle;
* more than ``media.pdf_max_pages`` pages is refused (the API's limit is 100);
* the text of each page is pypdf's ``extract_text()``; a page without text
  (a scan) gives an empty page section: there is no OCR;
* a PDF pypdf cannot parse is refused with its reason.
"""

from __future__ import annotations

import io

from ..driver.media import DocumentProcessor, Section, SourceBytes
from ..protocol.errors import MediaError

__all__ = [
    "render_document",
    "pdf_sections",
    "decode_text",
    "PdfDocumentProcessor",
    "TextDocumentProcessor",
    "PDF_MEDIA_TYPE",
    "TEXT_MEDIA_TYPES",
]

PDF_MEDIA_TYPE = "application/pdf"
#: Text media types read as UTF-8 (invalid bytes replaced).
TEXT_MEDIA_TYPES = ("text/plain", "text/markdown", "text/csv", "text/html", "text/xml", "application/json")


def render_document(sections: list[Section], *, title: str | None = None, context: str | None = None) -> str:
    """The text a model sees for a document (shape in the module doc)."""
    lines = ["<document>"]
    if title:
        lines.append(f"<title>{title}</title>")
    if context:
        lines.append(f"<context>{context}</context>")
    for section in sections:
        attrs = "".join(f' {name}="{value}"' for name, value in section.attrs)
        lines.append(f"<{section.tag}{attrs}>")
        if section.text:
            lines.append(section.text.rstrip("\n"))
        lines.append(f"</{section.tag}>")
    lines.append("</document>")
    return "\n".join(lines)


def decode_text(data: bytes) -> str:
    """UTF-8 text of ``data`` (a BOM dropped, invalid bytes replaced by U+FFFD)."""
    return data.decode("utf-8-sig", errors="replace")


def pdf_sections(data: bytes, *, max_pages: int, path: str) -> list[Section]:
    """One ``page`` section per page of the PDF ``data`` (rules in the module doc).

    Args:
        data: the PDF file.
        max_pages: refuse PDFs with more pages.
        path: the source's field path, for errors.

    Raises:
        MediaError: not a PDF, encrypted, too many pages, unreadable.
    """
    if b"%PDF-" not in data[:1024]:
        raise MediaError(path, "the document was declared as application/pdf, but its bytes are not a PDF")
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except (DependencyError, NotImplementedError) as exc:
                raise MediaError(
                    path, f"the PDF is encrypted in a way this server cannot open ({exc})"
                ) from None
            if not opened:
                raise MediaError(path, "the PDF is encrypted with a password; send it decrypted")
        count = len(reader.pages)
        if count > max_pages:
            raise MediaError(path, f"the PDF has {count} pages; the limit is {max_pages}")
        sections = []
        for number, page in enumerate(reader.pages, start=1):
            sections.append(Section("page", page.extract_text() or "", (("number", str(number)),)))
        return sections
    except MediaError:
        raise
    except FileNotDecryptedError:
        raise MediaError(path, "the PDF is encrypted with a password; send it decrypted") from None
    except DependencyError as exc:
        raise MediaError(path, f"the PDF is encrypted in a way this server cannot open ({exc})") from None
    except LimitReachedError:
        raise MediaError(
            path, "the PDF cannot be read: a stream in it expands beyond pypdf's decompression limit"
        ) from None
    except (
        PdfReadError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        RecursionError,
        OSError,
        AssertionError,
        ZeroDivisionError,
    ) as exc:
        raise MediaError(path, f"the PDF cannot be read ({type(exc).__name__}: {exc})") from None


class PdfDocumentProcessor(DocumentProcessor):
    """The default PDF processor (``pypdf``): :func:`pdf_sections` with
    ``media.pdf_max_pages``."""

    def process(self, document: SourceBytes) -> list[Section]:
        return pdf_sections(document.data, max_pages=self.config.pdf_max_pages, path=document.path)


class TextDocumentProcessor(DocumentProcessor):
    """Plain text documents (``text``): the bytes as UTF-8, one ``content`` section."""

    def process(self, document: SourceBytes) -> list[Section]:
        return [Section("content", decode_text(document.data))]
