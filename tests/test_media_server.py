"""Images and documents end to end: the official SDK against the app in process
whose echo models report what the driver received (``settings.report``).

Covers every source (base64, url, text, content, file), images and
documents inside tool results, conversion and downscaling per model, the
capability refusal and the placeholder fallback, count_tokens with images,
and hostile inputs, each followed by a request that must still succeed."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from media_files import FileServer, b64, image_bytes, make_pdf, png_header_only

from missive.media.tokens import estimate_image_tokens
from missive.testing import InProcessApp, in_process_app, live_server

ALL_IMAGES = ["image/jpeg", "image/png", "image/gif", "image/webp"]
TOOLS_CAPS = ["auto", "any", "tool", "none"]
PNG = image_bytes("PNG", (40, 20))
PDF = make_pdf(["Alpha page text", "Beta page text"])


def report_model(**caps: Any) -> dict[str, Any]:
    return {
        "driver": "echo",
        "context_window": 1_000_000,
        "settings": {"report": True, "capabilities": {"tool_choice": TOOLS_CAPS, **caps}},
    }


@pytest.fixture(scope="module")
def files() -> Iterator[FileServer]:
    with FileServer() as srv:
        srv.routes["/a.png"] = (200, {"content-type": "image/png"}, PNG)
        srv.routes["/doc.pdf"] = (200, {"content-type": "application/octet-stream"}, PDF)
        srv.routes["/notes.txt"] = (200, {"content-type": "text/plain; charset=utf-8"}, b"plain notes")
        srv.routes["/page.html"] = (200, {"content-type": "image/png"}, b"<html>not an image</html>")
        yield srv


@pytest.fixture(scope="module")
def app(files: FileServer) -> Iterator[InProcessApp]:
    config = {
        "server": {"max_body_bytes": 8_000_000},
        "media": {
            "fetch_allow": ["127.0.0.1"],
            "fetch_timeout": 3.0,
            "image_max_bytes": 1_000_000,
            "pdf_max_pages": 5,
        },
        "models": {
            "vision": report_model(input_media=ALL_IMAGES),
            "vision-small": report_model(input_media=["image/png"], image_max_edge=64),
            "text": report_model(),
        },
    }
    with in_process_app(config) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> Iterator[anthropic.Anthropic]:
    with app.sdk(api_key="t", timeout=60) as c:
        yield c


def image(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": b64(data)}}


def document(source: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "document", "source": source, **extra}


def pdf_source(data: bytes = PDF) -> dict[str, Any]:
    return {"type": "base64", "media_type": "application/pdf", "data": b64(data)}


def received(
    client: anthropic.Anthropic,
    content: list[dict[str, Any]],
    model: str = "vision",
    messages: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """The conversation the echo driver received, from its JSON answer."""
    msgs = messages or [{"role": "user", "content": content}]
    message = client.messages.create(model=model, max_tokens=5, messages=msgs, **kw)
    return json.loads(message.content[0].text)


def blocks(report: dict[str, Any], turn: int = -1) -> list[dict[str, Any]]:
    return report["turns"][turn]["blocks"]


# -- images ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "media"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
def test_base64_image_reaches_the_driver_unchanged(client: anthropic.Anthropic, fmt: str, media: str) -> None:
    data = image_bytes(fmt, (64, 48))
    got = blocks(received(client, [image(data, media), {"type": "text", "text": "what is this?"}]))
    assert got == [
        {
            "type": "image",
            "media_type": media,
            "width": 64,
            "height": 48,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        },
        {"type": "text", "text": "what is this?"},
    ]


def test_stream_and_non_stream_agree(client: anthropic.Anthropic) -> None:
    content = [image(image_bytes("JPEG", (300, 200)), "image/jpeg"), {"type": "text", "text": "hi"}]
    body = dict(model="vision-small", max_tokens=5, messages=[{"role": "user", "content": content}])
    created = client.messages.create(**body)
    with client.messages.stream(**body) as stream:
        streamed = stream.get_final_message()
    assert created.content[0].text == streamed.content[0].text
    assert created.usage.input_tokens == streamed.usage.input_tokens


def test_downscaled_and_converted_for_the_model(client: anthropic.Anthropic) -> None:
    got = blocks(
        received(client, [image(image_bytes("WEBP", (300, 150)), "image/webp")], model="vision-small")
    )
    assert got[0]["media_type"] == "image/png" and (got[0]["width"], got[0]["height"]) == (64, 32)


def test_oversized_image_error_refuses_instead_of_downsizing(client: anthropic.Anthropic) -> None:
    """``transformations.oversized_image``: ``"error"`` makes an image over the
    model's size a 400 naming its dimensions and the largest that fit;
    ``"downsize"`` (the default) fits it; neither is reported as ignored."""
    big = image(image_bytes("WEBP", (300, 150)), "image/webp")
    with pytest.raises(anthropic.BadRequestError) as caught:
        received(client, [{**big, "transformations": {"oversized_image": "error"}}], model="vision-small")
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("messages.0.content.0: the image is 300x150 pixels, larger than this model")
    assert "(64 pixels on the longer side; 64x32 fits)" in message
    raw = client.messages.with_raw_response.create(
        model="vision-small",
        max_tokens=5,
        messages=[{"role": "user", "content": [{**big, "transformations": {"oversized_image": "downsize"}}]}],
    )
    assert blocks(json.loads(raw.parse().content[0].text))[0]["width"] == 64  # type: ignore[union-attr]
    assert "transformations" not in raw.headers.get("missive-ignored", "")
    # One that fits passes with "error" too.
    small = {**image(image_bytes("PNG", (60, 20))), "transformations": {"oversized_image": "error"}}
    assert blocks(received(client, [small], model="vision-small"))[0]["width"] == 60


def test_count_tokens_accounts_for_images(client: anthropic.Anthropic) -> None:
    messages = [
        {
            "role": "user",
            "content": [image(image_bytes("PNG", (1000, 600))), {"type": "text", "text": "two words"}],
        }
    ]
    count = client.messages.count_tokens(model="vision", messages=messages).input_tokens
    assert count == 2 + estimate_image_tokens(1000, 600) == 2 + 800
    small = client.messages.count_tokens(model="vision-small", messages=messages).input_tokens
    assert small == 2 + estimate_image_tokens(64, 38)  # counted after fitting to the model
    usage = client.messages.create(model="vision", max_tokens=5, messages=messages).usage
    assert usage.input_tokens == count


def test_url_image_fetched_from_an_allowed_host(client: anthropic.Anthropic, files: FileServer) -> None:
    got = blocks(received(client, [{"type": "image", "source": {"type": "url", "url": files.url("/a.png")}}]))
    assert got[0]["sha256"] == hashlib.sha256(PNG).hexdigest() and got[0]["media_type"] == "image/png"


def test_text_only_model_refuses_images(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        received(client, [image(PNG)], model="text")
    assert caught.value.body["error"]["message"] == (
        "messages.0.content.0: input media type image/png is not supported by model 'text' (driver 'echo'); "
        "supported: text only"
    )  # the block named (found by a newcomer), as the API's messages do
    call = {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "x"}, image(PNG)],
    }
    conversation = [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    tool = {"name": "look", "input_schema": {"type": "object"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="text", max_tokens=5, messages=conversation, tools=[tool])
    assert caught.value.body["error"]["message"].startswith(
        "messages.2.content.0.content.1: input media type"
    )


# -- documents -------------------------------------------------------------------------


def test_pdf_document_with_title_and_context(client: anthropic.Anthropic) -> None:
    got = blocks(
        received(
            client,
            [
                document(pdf_source(), title="Report", context="Q3 numbers"),
                {"type": "text", "text": "summarize"},
            ],
            model="text",
        )
    )
    text = got[0]["text"]
    assert text.startswith(
        "<document>\n<title>Report</title>\n<context>Q3 numbers</context>\n<page number=\"1\">\n"
    )
    assert "Alpha page text\n</page>\n<page number=\"2\">\nBeta page text\n</page>\n</document>" in text
    assert got[1] == {"type": "text", "text": "summarize"}


def test_text_content_and_url_documents(client: anthropic.Anthropic, files: FileServer) -> None:
    got = blocks(
        received(
            client,
            [
                document({"type": "text", "media_type": "text/plain", "data": "plain body"}),
                document(
                    {
                        "type": "content",
                        "content": [
                            {"type": "text", "text": "first"},
                            {"type": "text", "text": "second"},
                            image(image_bytes("PNG", (10, 10))),
                        ],
                    }
                ),
                document({"type": "content", "content": "just a string"}),
                document({"type": "url", "url": files.url("/doc.pdf")}),
                document({"type": "url", "url": files.url("/notes.txt")}),
            ],
        )
    )
    assert got[0]["text"] == "<document>\n<content>\nplain body\n</content>\n</document>"
    assert got[1]["text"] == "<document>\n<content>\nfirst\nsecond\n</content>\n</document>"
    assert got[2]["type"] == "image" and (got[2]["width"], got[2]["height"]) == (10, 10)
    assert got[3]["text"] == "<document>\n<content>\njust a string\n</content>\n</document>"
    assert "<page number=\"2\">\nBeta page text" in got[4]["text"]
    assert got[5]["text"] == "<document>\n<content>\nplain notes\n</content>\n</document>"


def test_office_document(client: anthropic.Anthropic) -> None:
    import io

    import docx

    out = io.BytesIO()
    doc = docx.Document()
    doc.add_paragraph("Minutes of the meeting")
    doc.save(out)
    source = {
        "type": "base64",
        "media_type": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "data": b64(out.getvalue()),
    }
    got = blocks(received(client, [document(source, title="minutes.docx")], model="text"))
    assert got[0]["text"] == (
        "<document>\n<title>minutes.docx</title>\n<content>\nMinutes of the meeting\n</content>\n</document>"
    )


def test_citations_accepted_and_reported_as_ignored(app: InProcessApp) -> None:
    body = {
        "model": "text",
        "max_tokens": 5,
        "messages": [
            {
                "role": "user",
                "content": [
                    document(
                        {"type": "text", "media_type": "text/plain", "data": "cite me"},
                        citations={"enabled": True},
                    )
                ],
            }
        ],
    }
    response = app.http_client(httpx).post("/v1/messages", json=body, timeout=30)
    assert response.status_code == 200
    assert "messages.0.content.0.citations" in response.headers["missive-ignored"]
    assert response.json()["content"][0]["type"] == "text"  # answered without citations


def test_media_no_prompt_shows_is_reported_as_ignored(app: InProcessApp) -> None:
    """Images and documents in a system message or in the assistant prefill
    are not rendered: reported, never dropped silently."""
    body = {
        "model": "vision",
        "max_tokens": 5,
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}, image(PNG)]},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Sure"}, image(PNG)]},
        ],
    }
    response = app.http_client(httpx).post("/v1/messages", json=body, timeout=30)
    assert response.status_code == 200, response.text
    ignored = response.headers["missive-ignored"]
    assert "messages.0.content.1 (image in a system message" in ignored
    assert "messages.2.content.1 (image in a assistant prefill" not in ignored
    assert "messages.2.content.1 (image in an assistant prefill" in ignored


# -- tool results ---------------------------------------------------------------------------


def test_images_and_documents_inside_tool_results(client: anthropic.Anthropic) -> None:
    shot = image_bytes("PNG", (2000, 1000))
    messages = [
        {"role": "user", "content": "read the files"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {"f": "a.png"}},
                {"type": "tool_use", "id": "toolu_b", "name": "Read", "input": {"f": "b.pdf"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": [image(shot)]},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [
                        {"type": "text", "text": "PDF follows"},
                        document(pdf_source(), title="b.pdf"),
                    ],
                },
                {"type": "text", "text": "describe them"},
            ],
        },
    ]
    tools = [{"name": "Read", "input_schema": {"type": "object", "properties": {"f": {"type": "string"}}}}]
    got = blocks(received(client, [], messages=messages, tools=tools))
    first, second, text = got
    assert first["type"] == "tool_result" and first["content"][0]["type"] == "image"
    assert (first["content"][0]["width"], first["content"][0]["height"]) == (1568, 784)
    assert second["content"][0] == {"type": "text", "text": "PDF follows"}
    assert second["content"][1]["text"].startswith("<document>\n<title>b.pdf</title>\n<page number=\"1\">")
    assert text == {"type": "text", "text": "describe them"}


# -- bad inputs: a 400 naming the block, and the server keeps serving --------------------------

ENCRYPTED: bytes | None = None


def _encrypted_pdf() -> bytes:
    import io

    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(PDF)))
    writer.encrypt(user_password="pw", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _bad_inputs() -> list[tuple[str, dict[str, Any], str]]:
    big_png = b"\x89PNG\r\n\x1a\n" + os.urandom(1_100_000)
    truncated = image_bytes("PNG", (300, 300))
    return [
        (
            "malformed base64",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "@@@="}},
            "messages.0.content.0.source.data: the data is not valid base64",
        ),
        (
            "data URL",
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": "image/png",
                    "data": "data:image/png;base64," + b64(PNG),
                },
            },
            "messages.0.content.0.source.data: the data is a data: URL",
        ),
        (
            "empty data",
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}},
            "messages.0.content.0.source.data: the data is empty",
        ),
        (
            "mislabeled",
            image(PNG, "image/jpeg"),
            "messages.0.content.0.source: the image was declared as image/jpeg, but its bytes are image/png",
        ),
        (
            "unknown media type",
            image(PNG, "image/bmp"),
            "messages.0.content.0.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' "
            "or 'image/webp'",
        ),
        ("not an image", image(b"<svg/>" * 10), "is not a JPEG, PNG, GIF or WebP image"),
        ("truncated", image(truncated[: len(truncated) - 40]), "truncated or corrupt"),
        (
            "bomb",
            image(png_header_only(40_000, 40_000)),
            "messages.0.content.0.source: image refused as a decompression bomb",
        ),
        (
            "over the side limit",
            image(png_header_only(9000, 100)),
            "messages.0.content.0.source: image dimensions 9000x100 exceed the maximum of 8000 pixels a side",
        ),
        ("oversized", image(big_png), "decodes to more than the limit of 1000000 bytes"),
        (
            "file image",
            {"type": "image", "source": {"type": "file", "file_id": "file_abc"}},
            "messages.0.content.0.source: file sources need the Files API",
        ),
        (
            "file document",
            document({"type": "file", "file_id": "file_abc"}),
            "file sources need the Files API",
        ),
        (
            "pdf mislabeled",
            document(pdf_source(PNG)),
            "declared as application/pdf, but its bytes are not a PDF",
        ),
        ("pdf broken", document(pdf_source(PDF[:80])), "messages.0.content.0.source: the PDF cannot be read"),
        ("pdf encrypted", document(pdf_source(_encrypted_pdf())), "the PDF is encrypted with a password"),
        ("pdf too long", document(pdf_source(make_pdf(["p"] * 6))), "the PDF has 6 pages; the limit is 5"),
        (
            "unsupported document",
            document({"type": "base64", "media_type": "application/zip", "data": b64(b"PK\x03\x04")}),
            "document media type application/zip is not supported; supported: application/json, "
            "application/pdf",
        ),
        (
            "content item",
            document({"type": "content", "content": [{"type": "tool_use"}]}),
            "messages.0.content.0.source.content.0: content documents hold text and image blocks only",
        ),
    ]


BAD = _bad_inputs()


@pytest.mark.parametrize(("name", "block", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_400_and_the_server_keeps_serving(
    client: anthropic.Anthropic, name: str, block: dict[str, Any], message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        received(client, [block])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert message in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):  # count_tokens refuses it the same way
        client.messages.count_tokens(model="vision", messages=[{"role": "user", "content": [block]}])
    assert blocks(received(client, [image(PNG)]))[0]["width"] == 40  # still serving


def test_ssrf_attempts_refused(client: anthropic.Anthropic, files: FileServer) -> None:
    """The allow-list holds 127.0.0.1 only: the same local server reached as
    another loopback address, through a redirect to one, as IPv4-mapped IPv6,
    and the metadata address are refused; nothing reaches the server but the
    allowed redirecting request."""
    files.routes["/redirect"] = (302, {"location": files.url("/a.png", "127.0.0.2")}, b"")
    before = len(files.seen)
    attempts = [
        (files.url("/a.png", "127.0.0.2"), "127.0.0.2 is a loopback address"),
        (files.url("/a.png", "[::ffff:127.0.0.2]"), "a loopback address (embedded in ::ffff:7f00:2)"),
        (files.url("/redirect"), "127.0.0.2 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "a cloud metadata address"),
        ("file:///etc/passwd", "only http and https"),
    ]
    for target, reason in attempts:
        for kind in ("image", "document"):
            with pytest.raises(anthropic.BadRequestError) as caught:
                received(client, [{"type": kind, "source": {"type": "url", "url": target}}])
            assert reason in caught.value.body["error"]["message"]
            assert caught.value.body["error"]["message"].startswith("messages.0.content.0.source: ")
    assert [path for path, _ in files.seen[before:]] == ["/redirect", "/redirect"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        received(client, [{"type": "image", "source": {"type": "url", "url": files.url("/page.html")}}])
    assert "is not a JPEG, PNG, GIF or WebP image" in caught.value.body["error"]["message"]
    assert blocks(received(client, [image(PNG)]))[0]["width"] == 40


# -- the fallback, fetching off ------------------------------------------------------------------


def test_placeholder_fallback_and_fetching_off(files: FileServer) -> None:
    config = {
        "media": {"image_fallback": "placeholder", "fetch_urls": False},
        "models": {"text": report_model()},
    }
    with in_process_app(config) as app, app.sdk(api_key="t") as client:
        got = blocks(
            received(
                client,
                [image(image_bytes("JPEG", (640, 480)), "image/jpeg"), {"type": "text", "text": "and?"}],
                model="text",
            )
        )
        assert got == [
            {
                "type": "text",
                "text": "[image: image/jpeg, 640x480 pixels; not shown: model 'text' reads text only]",
            },
            {"type": "text", "text": "and?"},
        ]
        with pytest.raises(anthropic.BadRequestError) as caught:
            received(
                client,
                [{"type": "image", "source": {"type": "url", "url": files.url("/a.png")}}],
                model="text",
            )
        assert (
            "url sources are turned off on this server (media.fetch_urls)"
            in caught.value.body["error"]["message"]
        )


def test_unknown_fallback_stops_start_up() -> None:
    with pytest.raises(RuntimeError, match="media.image_fallback: no image processor named 'nope'"):
        with live_server(
            {"media": {"image_fallback": "nope"}, "models": {"e": {"driver": "echo"}}}, timeout=30
        ):
            pass


def test_processors_listed_by_missive_plugins() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "missive", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")},
    )
    data = json.loads(out.stdout)
    assert list(data["image_processors"]) == ["pillow", "placeholder"]
    assert data["document_processors"]["pypdf"]["media_types"] == ["application/pdf"]
    assert "office" in data["document_processors"]
