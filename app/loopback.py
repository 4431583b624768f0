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
