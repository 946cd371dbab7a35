"""Host allow lists: where a connection's credential may be sent, and which keyless hosts the
account lets agent-authored tools call.

An entry is `host` or `host:port` (lower case). It admits a URL whose host is `host`, whose port
is the entry's (or, without one, the default port of the URL's scheme), and whose scheme is
https, or http where the deployment allows private networks (the local stack): a credential or
an agent's request never crosses the network in clear text on a real deployment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

ENTRY_PATTERN = (r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
                 r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$")
ENTRY_MAX = 260
DEFAULT_PORTS = {"https": 443, "http": 80}


def valid_entry(entry: str) -> bool:
    """True for `host` or `host:port` with a DNS name (or IPv4 literal) and a port 1..65535."""
    return len(entry) <= ENTRY_MAX and re.fullmatch(ENTRY_PATTERN, entry) is not None


def checked_entry(entry: str) -> str:
    """`entry` if it is valid (a pydantic validator); else ValueError saying what an entry is."""
    if not valid_entry(entry):
        raise ValueError(f"{entry!r} is not a host or host:port (lower case, no scheme or path)")
    return entry


def admits(entries: Iterable[str], url: str, *, allow_http: bool) -> bool:
    """True when one of `entries` admits `url` (host, port and scheme)."""
    parts = urlsplit(url)
    schemes = {"https", "http"} if allow_http else {"https"}
    if parts.scheme not in schemes or not parts.hostname:
        return False
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return False
    return any(_origin(entry, parts.scheme) == (parts.hostname, port) for entry in entries)


def describe(entries: Iterable[str], *, allow_http: bool) -> str:
    """The entries in words, for an error message."""
    scheme = "https (or http on this deployment)" if allow_http else "https"
    return f"{', '.join(entries) or 'no host'} over {scheme}"


def _origin(entry: str, scheme: str) -> tuple[str, int]:
    host, _, port = entry.partition(":")
    return host, int(port) if port else DEFAULT_PORTS[scheme]
