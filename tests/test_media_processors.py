"""The built-in image and document processors, called directly: valid,
truncated, mislabeled, oversized and hostile inputs."""

from __future__ import annotations

import io
import zipfile

import pytest
from media_files import image_bytes, make_pdf, png_header_only
from PIL import Image

from missive.config import MediaConfig
from missive.driver.media import IMAGE_MEDIA_TYPES, ImageTarget, Section, SourceBytes
from missive.media.documents import PdfDocumentProcessor, TextDocumentProcessor, render_document
from missive.media.images import PillowImageProcessor, PlaceholderImageProcessor, sniff_image
from missive.media.office import DOCX, PPTX, XLSX, OfficeDocumentProcessor
from missive.media.tokens import estimate_image_tokens
from missive.protocol.errors import MediaError

CONFIG = MediaConfig()
ALL = frozenset(IMAGE_MEDIA_TYPES)
PATH = "messages.0.content.0.source"


def src(data: bytes, media_type: str = "image/png", url: str | None = None) -> SourceBytes:
    return SourceBytes(data=data, media_type=media_type, path=PATH, url=url)


def pillow(
    data: bytes,
    media_type: str = "image/png",
    *,
    accept: frozenset[str] = ALL,
    edge: int = 1568,
    config: MediaConfig = CONFIG,
):
    return PillowImageProcessor(config).process(
        src(data, media_type), ImageTarget(accept=accept, max_edge=edge)
    )


# -- images --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "media"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
def test_each_format_passes_unchanged_when_accepted(fmt: str, media: str) -> None:
    data = image_bytes(fmt, (64, 32))
    assert sniff_image(data) == media
    out = pillow(data, media)
    assert (out.media_type, out.width, out.height) == (media, 64, 32)
    assert out.data == data  # byte for byte: prompt caches stay valid


def test_downscaled_to_the_limit_keeping_aspect() -> None:
    out = pillow(image_bytes("PNG", (3000, 1000)), edge=300)
    assert (out.width, out.height) == (300, 100)
    with Image.open(io.BytesIO(out.data)) as img:
        assert img.format == "PNG" and img.size == (300, 100)


def _rotated_jpeg(size: tuple[int, int]) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: turn 90 degrees clockwise to display (phone photos)
    out = io.BytesIO()
    Image.new("RGB", size, (200, 0, 0)).save(out, format="JPEG", exif=exif.tobytes())
    return out.getvalue()


@pytest.mark.parametrize(("size", "upright"), [((400, 300), (300, 400)), ((4032, 3024), (1176, 1568))])
def test_exif_orientation_is_applied(size: tuple[int, int], upright: tuple[int, int]) -> None:
    """Every backend gets the photo upright, downscaled or not."""
    out = pillow(_rotated_jpeg(size), "image/jpeg")
    assert (out.width, out.height) == upright
    with Image.open(io.BytesIO(out.data)) as img:
        assert img.size == upright and img.getexif().get(0x0112, 1) == 1


def test_a_large_16_bit_png_is_downscaled_to_8_bits() -> None:
    """Pillow cannot reduce 16-bit grey, and a plain conversion clips it white."""
    from PIL import ImageDraw

    img = Image.new("I;16", (6400, 100))
    ImageDraw.Draw(img).rectangle((0, 0, 6400, 100), fill=40000)
    out = io.BytesIO()
    img.save(out, format="PNG")
    result = pillow(out.getvalue(), edge=1568)
    assert (result.width, result.height) == (1568, 25)
    with Image.open(io.BytesIO(result.data)) as fitted:
        assert fitted.mode == "L" and fitted.getpixel((10, 10)) == 40000 >> 8


def test_converted_when_the_backend_lacks_the_format() -> None:
    webp = image_bytes("WEBP", (50, 40), color=(10, 200, 10, 128), mode="RGBA")
    out = pillow(webp, "image/webp", accept=frozenset({"image/png", "image/jpeg"}))
    assert out.media_type == "image/png" and Image.open(io.BytesIO(out.data)).mode == "RGBA"
    jpeg_only = pillow(webp, "image/webp", accept=frozenset({"image/jpeg"}))
    with Image.open(io.BytesIO(jpeg_only.data)) as img:
        assert img.format == "JPEG" and img.mode == "RGB" and img.size == (50, 40)
        r, g, b = img.getpixel((25, 20))  # alpha flattened onto white: lighter than the colour
        assert g > 200 and r > 100


def test_animated_gif_becomes_its_first_frame() -> None:
    gif = image_bytes("GIF", (30, 30), frames=3)
    out = pillow(gif, "image/gif")
    assert out.media_type == "image/gif" and out.data != gif
    with Image.open(io.BytesIO(out.data)) as img:
        assert getattr(img, "n_frames", 1) == 1


@pytest.mark.parametrize(
    ("data", "declared", "message"),
    [
        (image_bytes("PNG"), "image/jpeg", "declared as image/jpeg, but its bytes are image/png"),
        (image_bytes("JPEG"), "image/gif", "declared as image/gif, but its bytes are image/jpeg"),
        (b"GIF89a" + b"\0" * 10, "image/png", "declared as image/png, but its bytes are image/gif"),
        (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/png", "not a JPEG, PNG, GIF or WebP"),
        (b"BM" + b"\0" * 100, "image/png", "not a JPEG, PNG, GIF or WebP"),
    ],
)
def test_mislabeled_or_unknown(data: bytes, declared: str, message: str) -> None:
    with pytest.raises(MediaError, match=message) as caught:
        pillow(data, declared)
    assert caught.value.message.startswith(PATH + ": ")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_truncated(fmt: str) -> None:
    full = image_bytes(fmt, (200, 200), color=(1, 2, 3))
    media = sniff_image(full)
    noisy = Image.effect_noise((200, 200), 80).convert("RGB")  # incompressible: truncation hits pixel data
    out = io.BytesIO()
    noisy.save(out, format=fmt)
    data = out.getvalue()
    with pytest.raises(MediaError, match="truncated or corrupt|cannot be read"):
        pillow(data[: len(data) // 2], media)
    with pytest.raises(MediaError):
        pillow(full[:16], media)


def test_decompression_bomb_refused_from_the_header() -> None:
    bomb = png_header_only(60_000, 60_000)  # 3.6 gigapixels claimed by a 100-byte file
    assert len(bomb) < 200
    with pytest.raises(MediaError, match="decompression bomb"):
        pillow(bomb)  # Pillow's own guard (2 x MAX_IMAGE_PIXELS) fires first at this size
    with pytest.raises(MediaError, match="12000x12000 exceed the maximum of 8000 pixels a side"):
        pillow(png_header_only(12_000, 12_000))
    config = MediaConfig(image_max_pixels=1_000_000)
    with pytest.raises(MediaError, match="2000x2000 = 4000000 pixels exceeds the limit of 1000000"):
        pillow(png_header_only(2000, 2000), config=config)


def test_real_bomb_refused_without_decoding() -> None:
    """A real 8001 x 100 PNG (small, compressible) over the side limit."""
    with pytest.raises(MediaError, match="8001x100"):
        pillow(image_bytes("PNG", (8001, 100), color=(0, 0, 0)))


def test_placeholder_fallback() -> None:
    text = PlaceholderImageProcessor(CONFIG).process(
        src(image_bytes("JPEG", (640, 480)), "image/jpeg"),
        ImageTarget(accept=frozenset(), max_edge=1568, model="m"),
    )
    assert text == "[image: image/jpeg, 640x480 pixels; not shown: model 'm' reads text only]"
    with pytest.raises(MediaError, match="declared as image/png"):
        PlaceholderImageProcessor(CONFIG).process(src(image_bytes("JPEG")), ImageTarget(frozenset(), 1568))
    with pytest.raises(MediaError, match="8000 pixels"):
        PlaceholderImageProcessor(CONFIG).process(
            src(png_header_only(9000, 10)), ImageTarget(frozenset(), 1568)
        )


def test_token_estimate() -> None:
    assert estimate_image_tokens(1092, 1092) == 1590  # the API's documented example: ~1590
    assert estimate_image_tokens(1, 1) == 1


# -- documents -------------------------------------------------------------------


def pdf_doc(data: bytes, media_type: str = "application/pdf") -> SourceBytes:
    return SourceBytes(data=data, media_type=media_type, path=PATH)


def test_pdf_text_per_page() -> None:
    sections = PdfDocumentProcessor(CONFIG).process(pdf_doc(make_pdf(["First page (one)", "Second page"])))
    assert [(s.tag, s.attrs) for s in sections] == [
        ("page", (("number", "1"),)),
        ("page", (("number", "2"),)),
    ]
    assert "First page (one)" in sections[0].text and "Second page" in sections[1].text
    rendered = render_document(sections, title="Report", context="From finance")
    assert rendered.startswith(
        "<document>\n<title>Report</title>\n<context>From finance</context>\n<page number=\"1\">\n"
    )
    assert rendered.endswith("Second page\n</page>\n</document>")


def test_pdf_page_limit() -> None:
    with pytest.raises(MediaError, match="the PDF has 3 pages; the limit is 2"):
        PdfDocumentProcessor(MediaConfig(pdf_max_pages=2)).process(pdf_doc(make_pdf(["a", "b", "c"])))


def test_pdf_mislabeled_truncated_broken() -> None:
    processor = PdfDocumentProcessor(CONFIG)
    with pytest.raises(MediaError, match="declared as application/pdf, but its bytes are not a PDF"):
        processor.process(pdf_doc(image_bytes("PNG")))
    pdf = make_pdf(["hello"])
    for broken in (
        pdf[:60],
        b"%PDF-1.4\n" + b"\x00garbage" * 50,
        pdf.replace(b"/Pages 2 0 R", b"/Pages 9 0 R"),
    ):
        with pytest.raises(MediaError, match="PDF cannot be read|PDF has 0 pages|cannot be read"):
            processor.process(pdf_doc(broken))


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-128", "AES-256"])
def test_encrypted_pdf(algorithm: str) -> None:
    from pypdf import PdfReader, PdfWriter

    def encrypt(user: str) -> bytes:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["secret text"]))))
        writer.encrypt(user_password=user, owner_password="owner", algorithm=algorithm)
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    processor = PdfDocumentProcessor(CONFIG)
    with pytest.raises(MediaError, match="encrypted with a password"):
        processor.process(pdf_doc(encrypt("user-pw")))
    # an owner password alone restricts editing, not reading: the text is there
    # (AES, the default of current PDF tools, needs pypdf's crypto extra)
    assert "secret text" in processor.process(pdf_doc(encrypt("")))[0].text


def test_text_document() -> None:
    sections = TextDocumentProcessor(CONFIG).process(pdf_doc("héllo\nwörld".encode() + b"\xff", "text/plain"))
    assert sections == [Section("content", "héllo\nwörld\ufffd")]


# -- office --------------------------------------------------------------------------


def office_bytes(kind: str) -> bytes:
    out = io.BytesIO()
    if kind == "docx":
        import docx

        document = docx.Document()
        document.add_paragraph("Quarterly summary")
        table = document.add_table(rows=1, cols=2)
        table.rows[0].cells[0].text, table.rows[0].cells[1].text = "revenue", "12"
        document.save(out)
    elif kind == "xlsx":
        import openpyxl

        workbook = openpyxl.Workbook()
        sheet = workbook.active
        sheet.title = "Numbers"
        sheet.append(["a", 1])
        sheet.append(["b", 2.5])
        workbook.save(out)
    else:
        import pptx

        presentation = pptx.Presentation()
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = "Roadmap"
        slide.placeholders[1].text = "Ship images"
        presentation.save(out)
    return out.getvalue()


def test_office_documents() -> None:
    processor = OfficeDocumentProcessor(CONFIG)
    docx_sections = processor.process(pdf_doc(office_bytes("docx"), DOCX))
    assert docx_sections == [Section("content", "Quarterly summary\n\nrevenue | 12")]
    xlsx_sections = processor.process(pdf_doc(office_bytes("xlsx"), XLSX))
    assert xlsx_sections[0].attrs == (("name", "Numbers"),) and xlsx_sections[0].text == "a\t1\nb\t2.5"
    pptx_sections = processor.process(pdf_doc(office_bytes("pptx"), PPTX))
    assert pptx_sections == [Section("slide", "Roadmap\nShip images", (("number", "1"),))]


def test_office_zip_bomb_and_garbage() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * 3_000_000)  # packs to a few KB
    processor = OfficeDocumentProcessor(MediaConfig(office_max_unpacked_bytes=1_000_000))
    with pytest.raises(MediaError, match="unpacks to 3000000 bytes; the limit is 1000000"):
        processor.process(pdf_doc(out.getvalue(), DOCX))
    with pytest.raises(MediaError, match="not a valid zip archive"):
        processor.process(pdf_doc(b"PK\x03\x04garbage", XLSX))
    with pytest.raises(MediaError, match="Word file cannot be read"):
        OfficeDocumentProcessor(CONFIG).process(pdf_doc(out.getvalue(), DOCX))  # within limits, not a docx
