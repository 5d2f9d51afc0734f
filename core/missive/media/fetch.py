"""Fetching image and document URLs without opening the server's network to clients.

Rules, for each hop (the first URL and every redirect):

1. only ``http`` and ``https`` URLs;
2. the host is resolved **once** (``getaddrinfo``); every address it gives
   must pass :func:`~missive.media.addresses.refusal` or the allow-list, or
   the fetch is refused (one bad answer is enough: a name that resolves to a
   public and a private address is refused);
3. the connection goes to the checked address itself: the request URL
   carries the IP, the ``Host`` header the original host, and for https the
   TLS server name (SNI, and the certificate check) the original host too.
   No second resolution happens, so DNS rebinding (a name that answers a
   public address to the check and a private one to the connection) cannot
   slip through;
4. redirects (301, 302, 303, 307, 308) are followed by hand, at most
   ``media.fetch_max_redirects``, each new URL checked from rule 1;
5. the whole fetch, redirects included, has ``media.fetch_timeout`` seconds;
   the body is read in chunks and refused past its byte limit (a larger
   ``Content-Length`` is refused before reading);
6. proxies from the environment are not used (they would do their own
   resolution), and no cookies or credentials are sent.

Every refusal is a :class:`~missive.protocol.errors.MediaError` (400) naming the
block's field path and the reason.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field

import anyio
import httpx

from ..protocol.errors import MediaError
from .addresses import AllowList, refusal

__all__ = ["FetchPolicy", "Fetched", "fetch", "resolve_host", "build_request", "checked_address"]

Resolver = Callable[[str, int], Awaitable[list[str]]]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
USER_AGENT = "missive-media-fetch/1"


log = logging.getLogger("missive.media")


async def resolve_host(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (``getaddrinfo``, TCP), as strings."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))


@dataclass(frozen=True)
class FetchPolicy:
    """How URLs may be fetched (from ``[media]``).

    Attributes:
        enabled: ``media.fetch_urls``.
        allow: the parsed ``media.fetch_allow``.
        timeout: seconds for the whole fetch, redirects included.
        max_redirects: redirects followed.
        resolver: ``(host, port) -> [address]``; tests replace it.
    """

    enabled: bool = True
    allow: AllowList = field(default_factory=AllowList)
    timeout: float = 10.0
    max_redirects: int = 5
    resolver: Resolver = resolve_host


@dataclass(frozen=True)
class Fetched:
    """A fetched body.

    Attributes:
        url: the final URL (after redirects).
        data: the body.
        content_type: the ``Content-Type`` media type, lowercased, without
            parameters; None when absent.
    """

    url: str
    data: bytes = field(repr=False)
    content_type: str | None


def build_request(url: httpx.URL, ip: str, *, method: str = "GET") -> httpx.Request:
    """A request for ``url`` that connects to ``ip``: the URL's host replaced
    by the address, ``Host`` and (https) the TLS server name kept as the
    original host, so virtual hosting and certificate checks still work."""
    host_header = url.netloc.decode("ascii")
    target = url.copy_with(host=ip)
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    headers = {"host": host_header, "user-agent": USER_AGENT, "accept": "*/*", "accept-encoding": "identity"}
    return httpx.Request(method, target, headers=headers, extensions=extensions)


async def checked_address(url: httpx.URL, policy: FetchPolicy, path: str) -> str:
    """The address to connect to for ``url``, after checking every address
    its host resolves to (rules 2-3; also the MCP connector's, :mod:`missive.tools.mcp_client`)."""
    host = url.host
    if not host:
        raise MediaError(path, f"cannot fetch {url}: the URL has no host")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            answers = await policy.resolver(host, port)
        except OSError as exc:
            raise MediaError(path, f"cannot fetch {url}: the host {host} does not resolve ({exc})") from None
        addresses = []
        for answer in answers:
            try:
                addresses.append(ipaddress.ip_address(answer))
            except ValueError:
                continue
        if not addresses:
            raise MediaError(path, f"cannot fetch {url}: the host {host} has no address") from None
    for ip in addresses:
        reason = refusal(ip)
        if reason and not policy.allow.allows(host, ip):
            raise MediaError(
                path,
                f"refused to fetch {url}: {host} is {reason} ({ip}); internal hosts must be listed "
                "in the server's media.fetch_allow",
            )
    return str(addresses[0])


async def _read_body(response: httpx.Response, url: httpx.URL, max_bytes: int, path: str) -> bytes:
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise MediaError(path, f"{url} is {int(length)} bytes; the limit is {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    # httpx annotates this async generator as an AsyncIterator, which has no aclose (mypy: type-var)
    async with aclosing(response.aiter_bytes()) as body:  # type: ignore[type-var]
        async for chunk in body:  # decoded: a gzip bomb stops at the limit too
            size += len(chunk)
            if size > max_bytes:
                raise MediaError(path, f"{url} is larger than the limit of {max_bytes} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


async def fetch(url: str, *, policy: FetchPolicy, max_bytes: int, path: str) -> Fetched:
    """GET ``url`` under the rules of the module doc.

    Args:
        url: the client's URL.
        policy: switches and limits (``[media]``).
        max_bytes: the body's limit, in bytes.
        path: the block's field path, for errors.

    Raises:
        MediaError: fetching is off, a bad scheme, a refused address, too
            many redirects, a non-2xx answer, a body over ``max_bytes``, a
            timeout, a connection failure.
    """
    if not policy.enabled:
        raise MediaError(
            path, "url sources are turned off on this server (media.fetch_urls); send the data as base64"
        )
    try:
        current = _checked_url(httpx.URL(url), path)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise MediaError(path, f"not a valid URL: {exc}") from None
    redirects = 0
    try:
        with anyio.fail_after(policy.timeout):
            async with httpx.AsyncClient(
                trust_env=False, follow_redirects=False, timeout=policy.timeout, http2=False
            ) as client:
                while True:
                    if current.scheme not in ("http", "https"):
                        raise MediaError(
                            path, f"cannot fetch {current}: only http and https URLs are fetched"
                        )
                    ip = await checked_address(current, policy, path)
                    request = build_request(current, ip)
                    response = await client.send(request, stream=True)
                    try:
                        if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
                            redirects += 1
                            if redirects > policy.max_redirects:
                                raise MediaError(path, f"{url}: more than {policy.max_redirects} redirects")
                            try:
                                current = _checked_url(current.join(response.headers["location"]), path)
                            except (httpx.InvalidURL, ValueError) as exc:
                                raise MediaError(
                                    path, f"{current} redirects to an invalid URL: {exc}"
                                ) from None
                            continue
                        if not 200 <= response.status_code < 300:
                            raise MediaError(
                                path, f"fetching {current} failed: the server answered {response.status_code}"
                            )
                        data = await _read_body(response, current, max_bytes, path)
                        content_type = response.headers.get("content-type")
                    finally:
                        await response.aclose()
                    media = content_type.split(";")[0].strip().lower() if content_type else None
                    return Fetched(url=str(current), data=data, content_type=media or None)
    except TimeoutError:
        raise MediaError(path, f"fetching {url} took longer than {policy.timeout:g} seconds") from None
    except httpx.HTTPError as exc:
        raise MediaError(path, f"fetching {current} failed: {type(exc).__name__}: {exc}") from None
    except MediaError:
        raise
    except Exception as exc:  # e.g. OverflowError for a port past 65535, IDNA errors, in an ExceptionGroup
        log.info("fetching %s failed", current, exc_info=True)
        raise MediaError(path, f"fetching {current} failed: {type(exc).__name__}") from None


def _checked_url(url: httpx.URL, path: str) -> httpx.URL:
    """``url`` if it may be fetched as written: no credentials (none are ever
    sent, and they are not echoed back), a port within 1-65535.

    Raises:
        MediaError: naming the problem without repeating the credentials.
    """
    if url.userinfo:
        raise MediaError(
            path, "URLs with credentials (user:password@) are not fetched; send the data as base64"
        )
    if url.port is not None and not 0 < url.port < 65536:
        raise MediaError(path, f"not a valid URL: port {url.port} is out of range")
    return url
