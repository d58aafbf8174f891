"""The Host names a server answers to, and the proxies whose forwarded headers it believes.

Without API keys the server answers only requests that name it: a web page can point its own
name at 127.0.0.1 (DNS rebinding) and then, as that name's origin, read and write a server
on the machine of whoever opened the page. The page's requests carry its name as their Host,
never an address, so an address that reaches the server, and localhost and its subdomains
(`app.localhost`: browsers resolve them to loopback themselves, RFC 6761), are answered.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: A host name as DNS writes it: dot-separated labels of letters, digits, '-' and '_'.
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
#: A port after a host, as a Host header may carry it.
_PORT = re.compile(r":\d*")
#: Characters of a refused Host header an answer quotes.
_SHOWN = 100


def _name_of(header: str) -> str | None:
    """A Host header's host: lower-case, without its port, an IPv6 address's brackets or a
    final dot, an address as `ipaddress` writes it (an IPv4-mapped IPv6 one as its IPv4,
    which Python 3.11 does not count as loopback); None if it names no host."""
    text = header.strip().lower()
    if text.startswith("["):
        host, bracket, port = text[1:].partition("]")
        if not bracket:
            return None
    else:
        host, colon, port = text.partition(":")
        port = colon + port
    if port and not _PORT.fullmatch(port):
        return None
    host = host.removesuffix(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host if _NAME.fullmatch(host) and not text.startswith("[") else None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return str(mapped or address)


def host_name(value: str) -> str:
    """An `--allowed-host` value as a Host header's host compares with it; ValueError for
    anything but a bare name or address (a URL, a port, a pattern)."""
    bare = f"[{value}]" if value.count(":") > 1 and not value.startswith("[") else value
    name = _name_of(bare)
    if name is None or ":" in bare.rpartition("]")[2]:
        raise ValueError(
            f"--allowed-host must be a host name or an IP address without a port, got {value!r}"
        )
    return name


def check_forwarded(value: str) -> None:
    """Refuse a `--forwarded-allow-ips` entry that is neither an address, a network nor `*`
    (uvicorn would compare it with client addresses as text, matching none)."""
    for entry in value.split(","):
        entry = entry.strip()
        try:
            if entry != "*":
                ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ValueError(
                "--forwarded-allow-ips (forwarded_allow_ips) must list IP addresses or "
                f"networks, comma-separated, or '*'; {entry!r} is none"
            ) from None


@dataclass(frozen=True)
class Hosts:
    """The Host names a server answers to."""

    #: Names and addresses answered besides loopback addresses.
    names: frozenset[str]
    #: Bound to every address (0.0.0.0, ::): any address names the server.
    any_address: bool

    @classmethod
    def served(cls, host: str, allowed: Sequence[str], keys: bool) -> Hosts | None:
        """What a server bound to `host` answers to, or None for any name: with keys and no
        `allowed` names, the key is what a request needs (a page cannot know it)."""
        if keys and not allowed:
            return None
        bound = host_name(host)
        unspecified = bound in ("0.0.0.0", "::")
        return cls(frozenset({"localhost", bound, *map(host_name, allowed)}), unspecified)

    def refusal(self, header: str | None) -> str | None:
        """Why a request with this Host header is not one for this server, or None (no Host
        header at all: not a browser's request)."""
        if header is None:
            return None
        name = _name_of(header)
        local = name is not None and name.endswith(".localhost")  # RFC 6761: loopback
        if name is not None and (name in self.names or local or self._address(name)):
            return None
        shown = header if len(header) <= _SHOWN else f"{header[:_SHOWN]}..."
        answered = ["localhost (and *.localhost)", "loopback addresses (127.0.0.1, [::1])"]
        answered += ["any IP address"] if self.any_address else []
        answered += sorted(n for n in self.names - {"localhost"} if not self._address(n))
        return (
            f"this server does not answer to the Host {shown!r}: it answers to "
            f"{', '.join(answered)}; start it with --allowed-host NAME for a name its clients "
            "use (without API keys it answers to no other: a web page can point its own name "
            "at this machine and drive the server, DNS rebinding)"
        )

    def _address(self, name: str) -> bool:
        """Whether a host is an address that reaches this server: a loopback one, or any if
        the server is bound to every address."""
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        return address.is_loopback or self.any_address
