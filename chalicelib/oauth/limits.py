"""How many OAuth clients may register, the one write anyone may cause without a credential.

Registration (RFC 7591) is open, so it is bounded twice per UTC hour, each by a counter in the
admin-tokens table whose window is in its key (a new hour is a new counter; TTL drops old ones):

- per source address (`WORKSET_REGISTRATIONS_PER_SOURCE_HOUR`, 20): the address API Gateway saw
  the connection come from (`requestContext.identity.sourceIp`; the local stack's socket peer),
  never a header the client sends. An IPv6 address counts by its /64, which one subscriber holds
  whole; an IPv4-mapped one as the IPv4 address it carries.
- from all sources together (`WORKSET_REGISTRATIONS_PER_HOUR`, 1000): many addresses cannot fill
  the table either. Past it, no one registers until the hour ends; clients a person already
  approved never register again, so they are untouched.

A registration is counted only once it is valid (a refused body writes nothing), against its
source first, so one address spending its quota never touches the shared one. Refused, it writes
nothing but the failed count: 429 with `Retry-After`, the seconds left in the hour. An unconsented
client expires a day after it registered (`clients.UNCONSENTED_CLIENT_LIFETIME`), so at most
about 24 hours' worth of the overall ceiling is ever stored.
"""

from __future__ import annotations

import ipaddress
import math
from datetime import datetime, timedelta

from chalicelib.base.config import settings
from chalicelib.oauth import OAuthError
from chalicelib.store import oauth as oauth_store

WINDOW = timedelta(hours=1)
UNKNOWN_SOURCE = "unknown"  # an event without a readable address: all such share one quota
IPV6_PREFIX = 64


def source_of(address: str | None) -> str:
    """The source a request counts against: an IPv4 address as is, an IPv6 address by its /64,
    anything unreadable as one shared `unknown`."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return UNKNOWN_SOURCE
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        bits = int(ip) >> (128 - IPV6_PREFIX) << (128 - IPV6_PREFIX)  # drops a zone id too
        return str(ipaddress.IPv6Network((bits, IPV6_PREFIX)))
    return str(ip)


def admit_registration(source: str, now: datetime) -> None:
    """Count one registration from `source` in the current hour; OAuthError 429 (nothing written
    but a refused count) when the source, or everyone together, has registered the hour's quota."""
    start = now.replace(minute=0, second=0, microsecond=0)
    end = start + WINDOW
    window = start.strftime("%Y-%m-%dT%H")
    retry_after = max(1, math.ceil((end - now).total_seconds()))
    config = settings()
    if not oauth_store.count_up(f"register#{source}#{window}", limit=config.registrations_per_source_hour,
                                expires_at=end):
        raise OAuthError("slow_down", f"this address registered {config.registrations_per_source_hour} clients "
                         "this hour, the most it may; try again later", status=429, retry_after=retry_after)
    if not oauth_store.count_up(f"register#*#{window}", limit=config.registrations_per_hour, expires_at=end):
        raise OAuthError("temporarily_unavailable", "too many clients registered this hour; try again later",
                         status=429, retry_after=retry_after)
