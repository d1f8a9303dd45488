"""The rule of every development-only HTTP endpoint (the gateway's /dev/token, the trace view):
answer only a caller on this machine that addresses this machine by a loopback name.

The caller's address alone is not enough. Through DNS rebinding a page from elsewhere makes its
own host name resolve to 127.0.0.1: the browser then connects from a loopback address, but every
request still carries that page's host name in its Host header, which no loopback name matches.
"""

from __future__ import annotations

import ipaddress
import re

# host, [v6] or host, then an optional port; nothing else (no user info, no path).
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::[0-9]{1,5})?")


def is_loopback_address(address: str | None) -> bool:
    """Whether `address` (a peer's IP address) is a loopback one: 127.0.0.0/8 or ::1."""
    try:
        return ipaddress.ip_address(address or "").is_loopback
    except ValueError:
        return False


def is_loopback_host(host: str | None) -> bool:
    """Whether a Host header names this machine: `localhost` or a loopback IP literal, with or
    without a port. Any other name could be one an attacker resolves to 127.0.0.1."""
    match = _HOST.fullmatch(host or "")
    if match is None:
        return False
    name = match["v6"] or match["name"]
    return name.lower() == "localhost" or is_loopback_address(name)


def is_local_request(peer: str | None, host: str | None) -> bool:
    """A request from a loopback address, addressed by a loopback name."""
    return is_loopback_address(peer) and is_loopback_host(host)
