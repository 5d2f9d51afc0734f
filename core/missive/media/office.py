"""Office documents as text: docx (python-docx), xlsx (openpyxl), pptx
(python-pptx). Installed with the ``office`` extra (``pip install 'missive-server[office]'``).

These files are zip archives. Before any library opens one, the archive is
checked: at most 10,000 entries, and the sum of their uncompressed sizes at
most ``media.office_max_unpacked_bytes`` (a zip bomb is refused without
being unpacked). ``defusedxml``, which the extra installs, makes openpyxl
parse XML with entity expansion off.

* docx: paragraphs, then each table as rows of ``cell | cell`` lines, one
  ``content`` section;
* xlsx: one ``sheet`` section per worksheet (``name`` attribute), each row's
  cell values (computed values, not formulas) separated by tabs, empty
  trailing rows and cells dropped;
* pptx: one ``slide`` section per slide (``number``), the text of its shapes
  in order.
"""

from __future__ import annotations

import io
import zipfile

from ..driver.media import DocumentProcessor, Section, SourceBytes
from ..protocol.errors import MediaError

__all__ = ["OfficeDocumentProcessor", "DOCX", "XLSX", "PPTX", "OFFICE_MEDIA_TYPES", "check_zip"]

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
OFFICE_MEDIA_TYPES = (DOCX, XLSX, PPTX)

MAX_ENTRIES = 10_000
_KIND = {DOCX: "Word", XLSX: "Excel", PPTX: "PowerPoint"}


def check_zip(data: bytes, *, max_unpacked: int, path: str, kind: str = "office file") -> None:
    """Refuse ``data`` unless it is a zip within the entry and size limits.

    Raises:
        MediaError: not a zip, too many entries, unpacks beyond ``max_unpacked`` bytes.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise MediaError(path, f"the {kind} is not a valid zip archive ({exc})") from None
    if len(infos) > MAX_ENTRIES:
        raise MediaError(path, f"the {kind} holds {len(infos)} files; the limit is {MAX_ENTRIES}")
    unpacked = sum(info.file_size for info in infos)
    if unpacked > max_unpacked:
        raise MediaError(path, f"the {kind} unpacks to {unpacked} bytes; the limit is {max_unpacked}")


def _docx(data: bytes) -> list[Section]:
    import docx

    document = docx.Document(io.BytesIO(data))
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines.append("")
        for row in table.rows:
            lines.append(" | ".join(cell.text for cell in row.cells))
    return [Section("content", "\n".join(lines).strip("\n"))]


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def _xlsx(data: bytes) -> list[Section]:
    import openpyxl

    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sections = []
        for sheet in workbook.worksheets:
            rows = []
            for row in sheet.iter_rows(values_only=True):
                cells = [_cell(v) for v in row]
                while cells and cells[-1] == "":
                    cells.pop()
                rows.append("\t".join(cells))
            while rows and rows[-1] == "":
                rows.pop()
            sections.append(Section("sheet", "\n".join(rows), (("name", sheet.title),)))
        return sections
    finally:
        workbook.close()


def _pptx(data: bytes) -> list[Section]:
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    sections = []
    for number, slide in enumerate(presentation.slides, start=1):
        texts = [shape.text_frame.text for shape in slide.shapes if getattr(shape, "has_text_frame", False)]
        sections.append(Section("slide", "\n".join(t for t in texts if t), (("number", str(number)),)))
    return sections


_READERS = {DOCX: _docx, XLSX: _xlsx, PPTX: _pptx}


class OfficeDocumentProcessor(DocumentProcessor):
    """docx, xlsx and pptx documents (``office``; rules in the module doc)."""

    def process(self, document: SourceBytes) -> list[Section]:
        kind = f"{_KIND[document.media_type]} file"
        check_zip(
            document.data, max_unpacked=self.config.office_max_unpacked_bytes, path=document.path, kind=kind
        )
        try:
            return _READERS[document.media_type](document.data)
        except MediaError:
            raise
        except Exception as exc:  # noqa: BLE001 - any parser failure is the client's file
            raise MediaError(
                document.path, f"the {kind} cannot be read ({type(exc).__name__}: {exc})"
            ) from None
