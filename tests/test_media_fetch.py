"""Safe URL fetching (missive.media.fetch, missive.media.addresses): which
addresses are refused, the allow-list, redirects checked again, DNS answers
used once, size and time limits.

Every server here listens on loopback. Refusals of private, link-local and
metadata addresses are checked with a resolver that answers those addresses
and a client that fails the test if any connection is attempted: the
refusal must come before any packet is sent."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import httpx
import pytest
from media_files import FileServer, image_bytes, slow_route, unbounded_route

from missive.media.addresses import parse_allow_list, refusal
from missive.media.fetch import FetchPolicy, build_request, fetch
from missive.protocol.errors import MediaError

PNG = image_bytes("PNG")
LOOPBACK_ONLY = parse_allow_list(["127.0.0.1"])

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server() -> Iterator[FileServer]:
    with FileServer() as srv:
        srv.routes["/a.png"] = (200, {"content-type": "image/png; charset=x"}, PNG)
        srv.routes["/to-a"] = (302, {"location": "/a.png"}, b"")
        srv.routes["/big"] = (200, {"content-type": "image/png"}, b"\0" * 5000)
        srv.routes["/chunked"] = unbounded_route(1_000_000)
        srv.routes["/slow"] = slow_route(3)
        srv.routes["/missing-location"] = (302, {}, b"")
        srv.routes["/loop"] = (302, {"location": "/loop"}, b"")
        srv.routes["/gone"] = (410, {}, b"")
        yield srv


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("100.64.1.1", "shared"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "private"),  # TEST-NET-1: special-purpose, Python counts it private
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ],
)
def test_refused_addresses(address: str, reason: str) -> None:
    found = refusal(ipaddress.ip_address(address))
    assert found is not None and reason in found


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_allow_list_entries() -> None:
    allow = parse_allow_list(["10.0.0.0/8", "intranet.example", "*.corp.example", "fd00::/8"])
    assert allow.allows("anything", ipaddress.ip_address("10.9.9.9"))
    assert allow.allows("anything", ipaddress.ip_address("::ffff:10.9.9.9"))
    assert allow.allows("INTRANET.example.", ipaddress.ip_address("192.168.0.2"))
    assert allow.allows("a.b.corp.example", ipaddress.ip_address("192.168.0.2"))
    assert not allow.allows("corp.example", ipaddress.ip_address("192.168.0.2"))
    assert not allow.allows("other.example", ipaddress.ip_address("192.168.0.2"))
    # a hostname entry never opens the metadata address; only an address entry does
    assert not allow.allows("intranet.example", ipaddress.ip_address("169.254.169.254"))
    assert parse_allow_list(["169.254.169.254"]).allows("x", ipaddress.ip_address("169.254.169.254"))
    for bad in ["", "a*.example", "*.", "host/path"]:
        with pytest.raises(ValueError):
            parse_allow_list([bad])


def test_request_connects_to_the_checked_address_with_the_original_host() -> None:
    request = build_request(httpx.URL("https://images.example:8443/a.png?x=1"), "203.0.113.7")
    assert request.url.host == "203.0.113.7" and request.url.port == 8443 and request.url.query == b"x=1"
    assert request.headers["host"] == "images.example:8443"
    assert request.extensions["sni_hostname"] == "images.example"  # TLS name and certificate check
    v6 = build_request(httpx.URL("http://images.example/a.png"), "2001:db8::5")
    assert str(v6.url) == "http://[2001:db8::5]/a.png" and "sni_hostname" not in v6.extensions


def no_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr(httpx.AsyncClient, "send", refuse)


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (["10.0.0.5"], "private"),
        (["169.254.169.254"], "cloud metadata"),
        (["93.184.215.14", "192.168.0.9"], "private"),  # one bad answer is enough
        (["::ffff:127.0.0.1"], "loopback"),
        (["fe80::1"], "link-local"),
    ],
)
async def test_names_resolving_inside_are_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch, answers: list[str], reason: str
) -> None:
    no_connection(monkeypatch)

    async def resolver(host: str, port: int) -> list[str]:
        return answers

    with pytest.raises(MediaError) as caught:
        await fetch(
            "http://internal.example/x.png",
            policy=FetchPolicy(resolver=resolver),
            max_bytes=10**6,
            path="messages.0.content.0.source",
        )
    assert caught.value.message.startswith("messages.0.content.0.source: refused to fetch")
    assert reason in caught.value.message and "media.fetch_allow" in caught.value.message


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/a.png",
        "http://[::ffff:10.0.0.1]/a.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://0.0.0.0/",
        "http://[::]/",
    ],
)
async def test_literal_internal_addresses_are_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    no_connection(monkeypatch)
    with pytest.raises(MediaError, match="refused to fetch"):
        await fetch(url, policy=FetchPolicy(), max_bytes=10**6, path="p")


@pytest.mark.parametrize(
    "scheme_url", ["file:///etc/passwd", "ftp://example.com/a.png", "gopher://x/", "data:,hi"]
)
async def test_only_http_and_https(monkeypatch: pytest.MonkeyPatch, scheme_url: str) -> None:
    no_connection(monkeypatch)
    with pytest.raises(MediaError, match="only http and https|no host|not a valid URL"):
        await fetch(scheme_url, policy=FetchPolicy(), max_bytes=10**6, path="p")


async def test_local_server_refused_by_default(server: FileServer) -> None:
    for host in ("127.0.0.1", "localhost", "127.1", "2130706433", "[::ffff:127.0.0.1]"):
        with pytest.raises(MediaError, match="loopback"):
            await fetch(server.url("/a.png", host), policy=FetchPolicy(), max_bytes=10**6, path="p")
    assert server.seen == []  # nothing reached it


async def test_allow_listed_host_is_fetched(server: FileServer) -> None:
    got = await fetch(
        server.url("/a.png"), policy=FetchPolicy(allow=LOOPBACK_ONLY), max_bytes=10**6, path="p"
    )
    assert got.data == PNG and got.content_type == "image/png"
    redirected = await fetch(
        server.url("/to-a"), policy=FetchPolicy(allow=LOOPBACK_ONLY), max_bytes=10**6, path="p"
    )
    assert redirected.data == PNG and redirected.url.endswith("/a.png")


async def test_redirect_to_loopback_is_checked_again(server: FileServer) -> None:
    server.routes["/to-other-loopback"] = (302, {"location": server.url("/a.png", "127.0.0.2")}, b"")
    server.routes["/to-metadata"] = (301, {"location": "http://169.254.169.254/latest/meta-data/"}, b"")
    server.routes["/to-file"] = (307, {"location": "file:///etc/passwd"}, b"")
    before = len(server.seen)
    policy = FetchPolicy(allow=LOOPBACK_ONLY)
    with pytest.raises(MediaError, match=r"127\.0\.0\.2 is a loopback address"):
        await fetch(server.url("/to-other-loopback"), policy=policy, max_bytes=10**6, path="p")
    with pytest.raises(MediaError, match="cloud metadata"):
        await fetch(server.url("/to-metadata"), policy=policy, max_bytes=10**6, path="p")
    with pytest.raises(MediaError, match="only http and https"):
        await fetch(server.url("/to-file"), policy=policy, max_bytes=10**6, path="p")
    assert [p for p, _ in server.seen[before:]] == ["/to-other-loopback", "/to-metadata", "/to-file"]


async def test_dns_answer_used_once_so_rebinding_cannot_switch_address(server: FileServer) -> None:
    """The name first resolves to the allowed address, then (as a rebinding
    DNS server would answer the connection's lookup) to another one. The
    fetch resolves once and connects to the checked address."""
    calls: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["127.0.0.2"]

    policy = FetchPolicy(allow=LOOPBACK_ONLY, resolver=rebinding)
    got = await fetch(f"http://rebind.test:{server.port}/a.png", policy=policy, max_bytes=10**6, path="p")
    assert got.data == PNG and calls == ["rebind.test"]
    assert server.seen[-1] == ("/a.png", f"rebind.test:{server.port}")  # Host header kept


async def test_limits(server: FileServer) -> None:
    policy = FetchPolicy(allow=LOOPBACK_ONLY, timeout=1.0, max_redirects=2)
    with pytest.raises(MediaError, match="5000 bytes; the limit is 1000"):
        await fetch(server.url("/big"), policy=policy, max_bytes=1000, path="p")
    with pytest.raises(MediaError, match="larger than the limit of 100000"):
        await fetch(server.url("/chunked"), policy=policy, max_bytes=100_000, path="p")
    with pytest.raises(MediaError, match="longer than 1 seconds"):
        await fetch(server.url("/slow"), policy=policy, max_bytes=10**6, path="p")
    with pytest.raises(MediaError, match="more than 2 redirects"):
        await fetch(server.url("/loop"), policy=policy, max_bytes=10**6, path="p")
    with pytest.raises(MediaError, match="answered 410"):
        await fetch(server.url("/gone"), policy=policy, max_bytes=10**6, path="p")
    with pytest.raises(MediaError, match="answered 302"):
        await fetch(server.url("/missing-location"), policy=policy, max_bytes=10**6, path="p")


async def test_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    no_connection(monkeypatch)
    with pytest.raises(MediaError, match=r"turned off on this server \(media.fetch_urls\)"):
        await fetch("https://example.com/a.png", policy=FetchPolicy(enabled=False), max_bytes=10, path="p")


async def test_unresolvable_host() -> None:
    async def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(MediaError, match="does not resolve"):
        await fetch("http://nowhere.invalid/", policy=FetchPolicy(resolver=nxdomain), max_bytes=10, path="p")


async def test_credentials_are_never_sent_nor_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    no_connection(monkeypatch)  # refused before any connection
    with pytest.raises(MediaError) as caught:
        await fetch("http://user:secret@example.com/a.png", policy=FetchPolicy(), max_bytes=10**6, path="p")
    assert "credentials" in str(caught.value) and "secret" not in str(caught.value)


@pytest.mark.parametrize("url", ["http://8.8.8.8:99999/a.pdf", "http://xn--/a.pdf", "http://[::1/a.png"])
async def test_malformed_urls_are_client_errors(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    no_connection(monkeypatch)
    with pytest.raises(MediaError, match="not a valid URL|failed|refused"):
        await fetch(url, policy=FetchPolicy(), max_bytes=10**6, path="p")
