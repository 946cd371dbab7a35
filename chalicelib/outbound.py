"""Every request Workset sends to a vendor or a webhook: resolve the host, refuse addresses it
must not reach, connect to the address it checked (so DNS cannot change between check and
connect), cap the answer's size, never follow a redirect."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from chalicelib.errors import ForbiddenDestination, VendorError, VendorTimeout

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class HttpRequest:
    """A fully built request."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


@dataclass(frozen=True)
class HttpResponse:
    """What the other side answered (the body possibly cut at the size cap)."""

    status: int
    headers: dict[str, str]
    body: bytes
    truncated: bool = False


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the operating system resolves `host` to."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return ip.ipv4_mapped
    return ip


def is_public(address: str) -> bool:
    """True for a globally routable unicast address (not loopback, private, link-local...)."""
    ip = _ip(address)
    return ip.is_global and not ip.is_multicast


def is_never_allowed(address: str) -> bool:
    """Link-local (where cloud metadata services answer), unspecified and multicast addresses are
    refused even where a deployment allows private networks: no vendor lives there."""
    ip = _ip(address)
    return ip.is_link_local or ip.is_unspecified or ip.is_multicast


def check_destination(url: str, *, allow_private: bool, resolver: Resolver = system_resolver) -> str:
    """Resolve the URL's host and answer the address to connect to; refuse a forbidden one."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ForbiddenDestination(f"{url!r} is not an http or https URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = resolver(parts.hostname, port)
    except OSError as error:
        raise VendorError(f"cannot resolve {parts.hostname}") from error
    if not addresses:
        raise VendorError(f"cannot resolve {parts.hostname}")
    refused = [address for address in addresses
               if is_never_allowed(address) or (not allow_private and not is_public(address))]
    if refused:
        raise ForbiddenDestination(
            f"{parts.hostname} resolves to {refused[0]}, a private, loopback or link-local address; "
            "Workset does not call those"
        )
    return addresses[0]


def send(request: HttpRequest, *, timeout: float, max_bytes: int, allow_private: bool,
         resolver: Resolver = system_resolver) -> HttpResponse:
    """Send one request; a timeout raises VendorTimeout, a transport failure VendorError."""
    address = check_destination(request.url, allow_private=allow_private, resolver=resolver)
    parts = urlsplit(request.url)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    connection = _connection(parts.scheme, parts.hostname or "", address, parts.port, timeout)
    headers = {"Host": parts.netloc, "User-Agent": "workset", **request.headers}
    try:
        connection.request(request.method, path, body=request.body, headers=headers)
        response = connection.getresponse()
        body = response.read(max_bytes + 1)
        return HttpResponse(
            status=response.status,
            headers={name.lower(): value for name, value in response.getheaders()},
            body=body[:max_bytes],
            truncated=len(body) > max_bytes,
        )
    except (TimeoutError, socket.timeout) as error:
        raise VendorTimeout(f"{parts.hostname} did not answer within {timeout:g} s") from error
    except (OSError, http.client.HTTPException) as error:
        raise VendorError(f"could not reach {parts.hostname}: {error.__class__.__name__}") from error
    finally:
        connection.close()


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address while speaking to the URL's host name."""

    def __init__(self, host: str, address: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    """The same, with TLS verified against the host name."""

    default_port = 443

    def connect(self) -> None:
        super().connect()
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.host)


def _connection(scheme: str, host: str, address: str, port: int | None, timeout: float) -> http.client.HTTPConnection:
    kind = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
    return kind(host, address, port, timeout)
