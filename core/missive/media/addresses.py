"""Which addresses URL fetching may connect to.

A URL in a request is chosen by the client; fetching it from the server is a
server-side request forgery (SSRF) risk: ``http://127.0.0.1:8642/``,
``http://169.254.169.254/latest/meta-data/`` (cloud metadata),
``http://10.0.0.5/admin``. :func:`refusal` names why an address is refused:
loopback, private (RFC 1918, RFC 4193 ``fc00::/7``), link-local
(``169.254.0.0/16``, ``fe80::/10``), multicast, unspecified, reserved,
shared (CGNAT ``100.64.0.0/10``), cloud metadata, or any other address that
is not globally routable (Python's ``ipaddress`` ``is_global``, which follows
the IANA special-purpose registries). IPv6 addresses that embed an IPv4 one
(IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``)
are judged by that IPv4 address too.

Operators who need internal hosts list them in ``media.fetch_allow``
(:func:`parse_allow_list`): hostnames, IP addresses or networks.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["AllowList", "parse_allow_list", "refusal", "METADATA_ADDRESSES"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Cloud instance-metadata endpoints (AWS, GCP, Azure, OpenStack: 169.254.169.254;
#: AWS IPv6: fd00:ec2::254; Alibaba: 100.100.100.200; Oracle: 192.0.0.192).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SHARED = ipaddress.ip_network("100.64.0.0/10")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    return None


def refusal(ip: IPAddress) -> str | None:
    """Why fetching may not connect to ``ip``, or None when it may.

    Returns a few words for the error message (``"a loopback address"``).
    """
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = refusal(inner)
            return f"{reason} (embedded in {ip})" if reason else None
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified:
        return "an unspecified address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True)
class AllowList:
    """Hosts and networks fetching may reach despite :func:`refusal`.

    A network or address entry allows those addresses whatever name led to
    them. A hostname entry allows that host (``*.example.com``: its
    subdomains) whatever it resolves to, except a cloud metadata address,
    which only an address or network entry can allow.
    """

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()

    def allows(self, host: str, ip: IPAddress) -> bool:
        """Whether ``ip``, reached through the URL host ``host``, is allowed."""
        if any(ip.version == net.version and ip in net for net in self.networks):
            return True
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            if self.allows(host, ip.ipv4_mapped):
                return True
        name = host.lower().rstrip(".")
        if ip in METADATA_ADDRESSES:
            return False
        return name in self.hosts or any(name.endswith(s) for s in self.suffixes)


#: A host name (labels of letters, digits, "-" and "_", joined by dots).
_HOST = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*")


def parse_allow_list(entries: Iterable[str]) -> AllowList:
    """``media.fetch_allow`` entries as an :class:`AllowList`.

    Raises:
        ValueError: an empty entry, a ``*`` anywhere but a leading ``*.``,
            or a host name that is not one (letters, digits, ``-``, ``_`` and
            dots, RFC 1123 with the underscore some internal names use).
    """
    networks = []
    hosts = set()
    suffixes = []
    for raw in entries:
        entry = raw.strip().lower().rstrip(".")
        if not entry:
            raise ValueError("media.fetch_allow: empty entry")
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        if entry.startswith("*."):
            rest = entry[2:]
            if not rest or "*" in rest:
                raise ValueError(f"media.fetch_allow: bad entry {raw!r}")
            suffixes.append("." + rest)
        elif "*" in entry or "/" in entry or not _HOST.fullmatch(entry):
            raise ValueError(
                f"media.fetch_allow: bad entry {raw!r} (a host, *.domain, an address or a network)"
            )
        else:
            hosts.add(entry)
    return AllowList(networks=tuple(networks), hosts=frozenset(hosts), suffixes=tuple(suffixes))
