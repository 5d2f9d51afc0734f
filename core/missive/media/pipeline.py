"""Runs the image and document processors over a request's blocks.

:class:`MediaPipeline` is built once per app from ``[media]`` and the
processors plugins registered (``register_image_processors``,
``register_document_processors``; installed plugins before the built-in
ones, so a plugin listing ``application/pdf`` replaces pypdf). For one
request, :meth:`MediaPipeline.prepare` walks every ``image`` and
``document`` block, ``tool_result`` contents included, and returns what
replaces each block in the conversation:

* an image becomes an :class:`~missive.driver.media.ImageInput` (checked,
  fitted to the model), or text from the fallback processor
  (``media.image_fallback``) when the model takes no images;
* a document becomes one text block (:func:`~missive.media.documents.render_document`),
  followed by the images of a ``content`` source, if any.

Sources: ``base64`` (decoded, size-checked first), ``url`` (fetched by
:mod:`missive.media.fetch`), ``text`` and ``content`` (documents), ``file``
(refused: there is no Files API). Processors run in worker threads, at most
one per CPU at a time, never on the event loop. Results of base64 sources
are cached by content hash (clients resend the same screenshot or PDF with
every turn of a conversation).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import ValidationError

from ..config import ConfigError, MediaConfig
from ..driver.media import (
    IMAGE_MEDIA_TYPES,
    DocumentProcessor,
    ImageInput,
    ImageProcessor,
    ImageTarget,
    Section,
    SourceBytes,
)
from ..kernel.specs import DocumentProcessorSpec, ImageProcessorSpec, load_object
from ..protocol.errors import MediaError, MissiveError
from ..protocol.schema.blocks import (
    Base64Source,
    ContentSource,
    DocumentBlock,
    FileSource,
    ImageBlock,
    TextBlock,
    TextSource,
    ToolResultBlock,
    UrlSource,
)
from .addresses import parse_allow_list
from .documents import PDF_MEDIA_TYPE, render_document
from .fetch import FetchPolicy, fetch
from .images import image_size, sniff_image
from .office import DOCX, PPTX, XLSX

__all__ = ["MediaPipeline", "Prepared", "accepted_images"]

log = logging.getLogger("missive.media")

_OFFICE_SUFFIXES = {".docx": DOCX, ".xlsx": XLSX, ".pptx": PPTX}
_CACHE_ENTRIES = 32
_CACHE_BYTES = 64 * 1024 * 1024


def accepted_images(input_media: frozenset[str]) -> frozenset[str]:
    """The image media types among a model's ``input_media``."""
    return frozenset(m for m in input_media if m in IMAGE_MEDIA_TYPES)


@dataclass
class Prepared:
    """What :meth:`MediaPipeline.prepare` found.

    Attributes:
        replacements: ``id(block)`` of each image/document block of the
            request -> the parts that replace it in the conversation.
        ignored: field paths accepted but not acted on (``citations``).
        processed: blocks processed, by kind (``image``, ``document``);
            images inside a ``content`` document count as images.
    """

    replacements: dict[int, list[Any]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    processed: Counter[str] = field(default_factory=Counter)


class _Cache:
    """A small LRU of processing results, bounded in entries and bytes."""

    def __init__(self, entries: int, max_bytes: int) -> None:
        self.entries = entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[Any, ...], tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple[Any, ...]) -> Any | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: tuple[Any, ...], value: Any, size: int) -> None:
        if size > self.max_bytes or key in self._items:
            return
        self._items[key] = (value, size)
        self._bytes += size
        while len(self._items) > self.entries or self._bytes > self.max_bytes:
            _, (_, old) = self._items.popitem(last=False)
            self._bytes -= old


def _result_size(result: Any) -> int:
    if isinstance(result, ImageInput):
        return len(result.data)
    if isinstance(result, list):
        return sum(len(s.text) for s in result if isinstance(s, Section))
    return len(str(result))


class MediaPipeline:
    """See the module doc.

    Args:
        config: the ``[media]`` table.
        image_processors: registered image processors by name, in priority order.
        document_processors: registered document processors by name, in priority order.
        policy: URL fetching rules; by default from ``config``.

    Raises:
        ConfigError: ``media.image_fallback`` names no registered image processor.
    """

    def __init__(
        self,
        config: MediaConfig,
        image_processors: Mapping[str, ImageProcessorSpec],
        document_processors: Mapping[str, DocumentProcessorSpec],
        *,
        policy: FetchPolicy | None = None,
    ) -> None:
        self.config = config
        self.image_specs = dict(image_processors)
        self.document_specs = dict(document_processors)
        if config.image_fallback is not None and config.image_fallback not in self.image_specs:
            known = ", ".join(sorted(self.image_specs)) or "none"
            raise ConfigError(
                f"media.image_fallback: no image processor named {config.image_fallback!r} (registered: "
                f"{known})"
            )
        self.policy = policy or FetchPolicy(
            enabled=config.fetch_urls,
            allow=parse_allow_list(config.fetch_allow),
            timeout=config.fetch_timeout,
            max_redirects=config.fetch_max_redirects,
        )
        self._built: dict[str, Any] = {}
        self._limiter = anyio.CapacityLimiter(max(1, os.cpu_count() or 1))
        self._cache = _Cache(_CACHE_ENTRIES, _CACHE_BYTES)

    @property
    def image_fallback(self) -> str | None:
        """The fallback image processor's name, if configured."""
        return self.config.image_fallback

    def document_media_types(self) -> list[str]:
        """Document media types some registered processor reads, sorted."""
        return sorted({m for spec in self.document_specs.values() for m in spec.media_types})

    # -- processors ------------------------------------------------------------

    def _build(self, spec: ImageProcessorSpec | DocumentProcessorSpec, path: str) -> Any:
        key = f"{type(spec).__name__}:{spec.name}"
        if key not in self._built:
            try:
                cls = load_object(spec.factory)
            except ImportError as exc:
                extra = " (pip install 'missive-server[office]')" if spec.name == "office" else ""
                raise MediaError(
                    path, f"the {spec.name} processor is not installed on this server{extra}: {exc}"
                ) from None
            self._built[key] = cls(self.config)
        return self._built[key]

    def _image_processor(
        self, media_type: str, accept: frozenset[str], path: str
    ) -> tuple[str, ImageProcessor]:
        if not accept:
            name = self.config.image_fallback
            if name is None:  # check_request refuses before; kept as a guard
                raise MediaError(path, "this model does not take images")
            return name, self._build(self.image_specs[name], path)
        for spec in self.image_specs.values():
            if media_type in spec.media_types and spec.name != self.config.image_fallback:
                return spec.name, self._build(spec, path)
        raise MediaError(path, f"no image processor on this server reads {media_type}")

    def _document_processor(self, media_type: str, path: str) -> tuple[str, DocumentProcessor]:
        for spec in self.document_specs.values():
            if media_type in spec.media_types:
                return spec.name, self._build(spec, path)
        supported = ", ".join(self.document_media_types()) or "none"
        raise MediaError(path, f"document media type {media_type} is not supported; supported: {supported}")

    async def _run(self, processor: Any, name: str, source: SourceBytes, *args: Any, cache: bool) -> Any:
        def work() -> Any:
            key = None
            if cache:
                digest = hashlib.sha256(source.data).hexdigest()
                key = (name, digest, source.media_type, *args)
                found = self._cache.get(key)
                if found is not None:
                    return found
            result = processor.process(source, *args)
            if key is not None:
                self._cache.put(key, result, _result_size(result))
            return result

        try:
            return await anyio.to_thread.run_sync(work, limiter=self._limiter)
        except MissiveError:
            raise
        except Exception as exc:  # noqa: BLE001 - a processor bug must not become a 500 loop
            log.exception("processor %s failed on %s", name, source.path)
            raise MediaError(source.path, f"cannot be processed ({type(exc).__name__})") from None

    # -- sources -----------------------------------------------------------------

    @staticmethod
    def _decode_base64(data: str, path: str, limit: int) -> bytes:
        compact = "".join(data.split())
        if compact.startswith("data:"):
            raise MediaError(path, "the data is a data: URL; send only the base64 text after the comma")
        if len(compact) // 4 * 3 > limit + 2:
            raise MediaError(path, f"the data decodes to more than the limit of {limit} bytes")
        try:
            decoded = base64.b64decode(compact, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MediaError(path, f"the data is not valid base64 ({exc})") from None
        if not decoded:
            raise MediaError(path, "the data is empty")
        if len(decoded) > limit:
            raise MediaError(path, f"the data is {len(decoded)} bytes; the limit is {limit}")
        return decoded

    @staticmethod
    def _file_refused(path: str) -> MediaError:
        return MediaError(
            path,
            "file sources need the Files API, which this server does not have; "
            "send the data as base64 (or a URL)",
        )

    # -- images --------------------------------------------------------------------

    async def _image(self, block: ImageBlock, path: str, target: ImageTarget) -> Any:
        source = block.source
        spath = f"{path}.source"
        limit = self.config.image_max_bytes
        if isinstance(source, Base64Source):
            if source.media_type not in IMAGE_MEDIA_TYPES:
                raise MediaError(
                    f"{spath}.media_type",
                    "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
                )
            data = self._decode_base64(source.data, f"{spath}.data", limit)
            actual = sniff_image(data)
            if actual is None:
                raise MediaError(
                    spath,
                    "the data is not a JPEG, PNG, GIF or WebP image (its first bytes match none of them)",
                )
            if actual != source.media_type:
                raise MediaError(
                    spath, f"the image was declared as {source.media_type}, but its bytes are {actual}"
                )
            raw = SourceBytes(data=data, media_type=actual, path=spath)
            cache = True
        elif isinstance(source, UrlSource):
            fetched = await fetch(source.url, policy=self.policy, max_bytes=limit, path=spath)
            actual = sniff_image(fetched.data)
            if actual is None:
                raise MediaError(
                    spath,
                    f"the file at {fetched.url} ({fetched.content_type or 'no content type'}) is not a JPEG, "
                    "PNG, GIF or WebP image",
                )
            raw = SourceBytes(data=fetched.data, media_type=actual, path=spath, url=fetched.url)
            cache = False
        elif isinstance(source, FileSource):
            raise self._file_refused(spath)
        else:  # pragma: no cover - the schema admits no other source
            raise MediaError(spath, f"unsupported image source type {source.type!r}")
        transformations = block.transformations
        if target.accept and transformations is not None and transformations.oversized_image == "error":
            await self._check_fits(raw, target, path)
        name, processor = self._image_processor(actual, target.accept, path)
        result = await self._run(processor, name, raw, target, cache=cache)
        if isinstance(result, str):
            return TextBlock(type="text", text=result)
        if not isinstance(result, ImageInput):
            raise MediaError(spath, f"the {name} processor returned {type(result).__name__}")
        return result

    async def _check_fits(self, raw: SourceBytes, target: ImageTarget, path: str) -> None:
        """``transformations.oversized_image: "error"``: an image whose longer
        side exceeds what the model observes is a 400 naming its dimensions and
        the largest that fit (SDK 2.16 ``BetaImageTransformationsParam``),
        where by default it is downsized. Only the header is read."""
        limits = {"max_side": self.config.image_max_side, "max_pixels": self.config.image_max_pixels}
        width, height = await anyio.to_thread.run_sync(
            lambda: image_size(raw, **limits), limiter=self._limiter
        )
        if max(width, height) <= target.max_edge:
            return
        scale = target.max_edge / max(width, height)
        fit = f"{max(1, round(width * scale))}x{max(1, round(height * scale))}"
        raise MediaError(
            path,
            f"the image is {width}x{height} pixels, larger than this model observes "
            f"({target.max_edge} pixels on the longer side; {fit} fits), and "
            'transformations.oversized_image is "error"; scale it down, or leave oversized_image at '
            '"downsize" to have it fitted',
        )

    # -- documents -------------------------------------------------------------------

    def _url_document_type(self, data: bytes, content_type: str | None, url: str) -> str:
        if b"%PDF-" in data[:1024]:
            return PDF_MEDIA_TYPE
        if content_type and any(content_type in s.media_types for s in self.document_specs.values()):
            return content_type
        if data.startswith(b"PK\x03\x04"):
            lowered = url.lower().split("?")[0]
            for suffix, media in _OFFICE_SUFFIXES.items():
                if lowered.endswith(suffix):
                    return media
        return content_type or "application/octet-stream"

    async def _document(
        self, block: DocumentBlock, path: str, target: ImageTarget, prepared: Prepared
    ) -> list[Any]:
        source = block.source
        spath = f"{path}.source"
        limit = self.config.document_max_bytes
        images: list[Any] = []
        if isinstance(block.citations, dict) and block.citations.get("enabled"):
            prepared.ignored.append(f"{path}.citations")
        if isinstance(source, TextSource):
            sections = [Section("content", source.data)]
        elif isinstance(source, ContentSource):
            sections, images = await self._content_source(source, spath, target)
            prepared.processed["image"] += len(images)
        elif isinstance(source, FileSource):
            raise self._file_refused(spath)
        else:
            if isinstance(source, Base64Source):
                data = self._decode_base64(source.data, f"{spath}.data", limit)
                raw = SourceBytes(data=data, media_type=source.media_type.lower(), path=spath)
                cache = True
            else:
                fetched = await fetch(source.url, policy=self.policy, max_bytes=limit, path=spath)
                media = self._url_document_type(fetched.data, fetched.content_type, fetched.url)
                raw = SourceBytes(data=fetched.data, media_type=media, path=spath, url=fetched.url)
                cache = False
            name, processor = self._document_processor(raw.media_type, spath)
            sections = await self._run(processor, name, raw, cache=cache)
            if not isinstance(sections, list) or not all(isinstance(s, Section) for s in sections):
                raise MediaError(spath, f"the {name} processor returned no sections")
        text = render_document(sections, title=block.title, context=block.context)
        return [TextBlock(type="text", text=text), *images]

    async def _content_source(
        self, source: ContentSource, path: str, target: ImageTarget
    ) -> tuple[list[Section], list[Any]]:
        if isinstance(source.content, str):
            return [Section("content", source.content)], []
        texts: list[str] = []
        images: list[Any] = []
        for k, item in enumerate(source.content):
            ipath = f"{path}.content.{k}"
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "text" and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif kind == "image":
                try:
                    block = ImageBlock.model_validate(item)
                except ValidationError as exc:
                    raise MediaError(ipath, f"not a valid image block ({exc.errors()[0]['msg']})") from None
                images.append(await self._image(block, ipath, target))
            else:
                raise MediaError(ipath, "content documents hold text and image blocks only")
        return [Section("content", "\n".join(texts))], images

    # -- the request -------------------------------------------------------------------

    async def prepare(
        self, request: Any, *, input_media: frozenset[str], max_edge: int | None, model: str
    ) -> Prepared:
        """Process every image and document block of ``request``.

        Args:
            request: the validated body (``CountTokensRequest`` or ``MessagesRequest``).
            input_media: the model's ``input_media`` capability.
            max_edge: the model's ``image_max_edge`` capability (None: only
                ``media.image_max_edge`` applies).
            model: the configured model id, for messages.

        Raises:
            MediaError: a block that cannot be used (docs/media.md lists why).
        """
        edge = self.config.image_max_edge if max_edge is None else min(max_edge, self.config.image_max_edge)
        target = ImageTarget(accept=accepted_images(input_media), max_edge=edge, model=model)
        prepared = Prepared()
        for i, message in enumerate(request.messages):
            if isinstance(message.content, str):
                continue
            for j, block in enumerate(message.content):
                path = f"messages.{i}.content.{j}"
                await self._block(block, path, target, prepared)
                if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                    for k, inner in enumerate(block.content):
                        await self._block(inner, f"{path}.content.{k}", target, prepared)
        return prepared

    async def _block(self, block: Any, path: str, target: ImageTarget, prepared: Prepared) -> None:
        if isinstance(block, ImageBlock):
            prepared.replacements[id(block)] = [await self._image(block, path, target)]
            prepared.processed["image"] += 1
        elif isinstance(block, DocumentBlock):
            prepared.replacements[id(block)] = await self._document(block, path, target, prepared)
            prepared.processed["document"] += 1
