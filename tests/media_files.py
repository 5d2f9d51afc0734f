"""Small images, PDFs and office files made by the tests themselves, plus a
local HTTP server to fetch them from (loopback only)."""

from __future__ import annotations

import base64
import io
import struct
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from PIL import Image

from missive.testing import start_http_server, stop_http_server

__all__ = ["image_bytes", "b64", "png_header_only", "make_pdf", "FileServer"]


def image_bytes(
    fmt: str = "PNG",
    size: tuple[int, int] = (40, 20),
    color: Any = (200, 30, 30),
    mode: str = "RGB",
    frames: int = 1,
) -> bytes:
    """An image of one colour in ``fmt`` (PNG, JPEG, GIF, WEBP); ``frames`` > 1: animated."""
    img = Image.new(mode, size, color)
    out = io.BytesIO()
    if frames > 1:
        others = [
            Image.new(mode, size, (i * 40 % 256, 0, 0) if mode == "RGB" else color) for i in range(1, frames)
        ]
        img.save(out, format=fmt, save_all=True, append_images=others, duration=100, loop=0)
    else:
        img.save(out, format=fmt)
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` (a decompression bomb's
    header) with a tiny, valid-looking IDAT: never decodable to that size."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def make_pdf(pages: list[str]) -> bytes:
    """A real PDF (one Helvetica text line per page), written by hand with a correct xref."""
    objects: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    font = 3 + 2 * n
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 14 Tf 72 720 Td ({escaped}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


Route = Callable[[BaseHTTPRequestHandler], None]


class FileServer:
    """A loopback HTTP server: ``routes[path] = (status, headers, body)`` or a
    callable taking the handler. Records ``(path, Host header)`` of each request."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.routes: dict[str, Any] = {}
        self.seen: list[tuple[str, str | None]] = []
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def __enter__(self) -> FileServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                fake.seen.append((self.path, self.headers.get("host")))
                route = fake.routes.get(self.path)
                if route is None:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if callable(route):
                    route(self)
                    return
                status, headers, body = route
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server, _ = start_http_server(Handler, self.host)
        self.port = self._server.server_address[1]
        return self

    def __exit__(self, *exc: object) -> None:
        stop_http_server(self._server)


def slow_route(seconds: float) -> Route:
    """A route that sends headers, then stalls ``seconds`` before the body."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "image/png")
        handler.send_header("content-length", "100")
        handler.end_headers()
        handler.wfile.flush()
        time.sleep(seconds)
        try:
            handler.wfile.write(b"\0" * 100)
        except OSError:
            pass

    return route


def unbounded_route(total: int) -> Route:
    """A route streaming ``total`` bytes with no Content-Length (chunked)."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "image/png")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        sent = 0
        try:
            while sent < total:
                piece = b"\x89PNG\r\n\x1a\n" + b"\0" * 65528
                handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                sent += len(piece)
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    return route
