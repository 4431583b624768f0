"""Whether a host name or address is this machine only (what nobody else can reach or read)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(authority: str) -> str:
    """The name in a Host header or an origin's authority, without its port: "[::1]:8080" -> "::1"."""
    authority = authority.strip().rstrip(".")
    if authority.startswith("["):
        return authority[1:].partition("]")[0]
    if authority.count(":") == 1:  # more than one: a bare IPv6 address
        authority = authority.partition(":")[0].rstrip(".")
    return authority


def is_loopback_origin(origin: str) -> bool:
    """True for a page served from this machine: http(s)://localhost, 127.x or [::1], any port."""
    scheme, sep, authority = origin.strip().partition("://")
    return scheme.lower() in ("http", "https") and bool(sep) and "/" not in authority and is_loopback(host_of(authority))
