"""Every request Workset sends to a vendor or a webhook: resolve the host, refuse addresses it
must not reach (also when an IPv6 address carries an IPv4 one), connect to the address it checked
(so DNS cannot change between check and connect), hold the whole exchange to one deadline (the
name lookup included), cap the answer's size, never follow a redirect."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

from chalicelib.base.errors import ForbiddenDestination, VendorError, VendorTimeout
from chalicelib.net.urls import redacted

Resolver = Callable[[str, int], list[str]]
# Hop-by-hop and framing headers: the HTTP client sets them, so neither a tool's template nor a
# connection may (a `Proxy-*` header neither).
CLIENT_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "expect",
                            "keep-alive", "trailer"})


def is_client_header(name: str) -> bool:
    """True for a header only the HTTP client may set."""
    lowered = name.lower()
    return lowered in CLIENT_HEADERS or lowered.startswith("proxy-")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CHUNK = 64 * 1024
# Where an IPv6 address carries an IPv4 address in its last 32 bits (RFC 6052, RFC 8215, RFC 4291).
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# AWS's instance metadata service, DNS resolver and time server over IPv6 (fd00:ec2::254, ::253,
# ::123): unique local addresses, so only the link-local rule's intent, not its test, covers them.
_CLOUD_SERVICES = ipaddress.IPv6Network("fd00:ec2::/64")


@dataclass(frozen=True)
class HttpRequest:
    """A fully built request. Its repr leaves out the headers and the body, which may carry a
    credential (a connection's, or one a tool's author pasted into a header)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    body: bytes | None = field(default=None, repr=False)


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
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _judged(address: str) -> list[IPAddress]:
    """The addresses a destination is judged by: itself and every IPv4 address it carries.

    An IPv6 address can carry an IPv4 address that the network will deliver to (a dual-stack
    socket, a NAT64 gateway, a 6to4 or Teredo relay), so ::ffff:127.0.0.1 or 64:ff9b::a9fe:a9fe
    must be refused like 127.0.0.1 or 169.254.169.254 are.
    """
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    last32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    # IPv4-mapped and IPv4-translated addresses are only IPv6 spellings of the IPv4 address: the
    # IPv4 address alone decides (the ::ffff:0:0/96 block itself counts as reserved).
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _IPV4_TRANSLATED:
        return [last32]
    carried: list[IPAddress] = []
    # :: and ::1 are the unspecified and loopback addresses, not IPv4-compatible ones; the IPv6
    # rules already refuse them.
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:
        carried.append(last32)
    if any(ip in prefix for prefix in _NAT64):
        carried.append(last32)
    if ip.sixtofour is not None:
        carried.append(ip.sixtofour)
    if ip.teredo is not None:
        carried.extend(ip.teredo)  # (server, client): both are hosts the tunnel reaches
    return [ip, *carried]


def is_public(address: str) -> bool:
    """True for a globally routable unicast address (not loopback, private, link-local...),
    IPv4 addresses carried inside IPv6 included."""
    return all(ip.is_global and not ip.is_multicast for ip in _judged(address))


def is_never_allowed(address: str) -> bool:
    """Link-local (where cloud metadata services answer), unspecified and multicast addresses, and
    the cloud's own services over IPv6, are refused even where a deployment allows private
    networks: no vendor lives there. IPv4 addresses carried inside IPv6 count too."""
    return any(ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip in _CLOUD_SERVICES
               for ip in _judged(address))


def check_destination(url: str, *, allow_private: bool, resolver: Resolver | None = None,
                      timeout: float | None = None) -> str:
    """Resolve the URL's host (within `timeout` seconds, if given: a tenant's name server can stall
    a lookup for tens of seconds) and answer the address to connect to; refuse a forbidden one,
    without naming the address a name resolved to (a deployment's internal map is not the
    tenant's to read). The resolver is `system_resolver` as it is at call time (tests stub it)."""
    resolver = resolver or system_resolver
    if timeout is not None:
        resolver = _within(resolver, _Deadline(timeout), timeout)
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ForbiddenDestination(f"{redacted(url)!r} is not an http or https URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ForbiddenDestination(f"{redacted(url)!r} has a port that is not a number from 1 to 65535") from None
    try:
        addresses = resolver(parts.hostname, port)
    except (OSError, UnicodeError) as error:
        raise VendorError(f"cannot resolve {parts.hostname}") from error
    if not addresses:
        raise VendorError(f"cannot resolve {parts.hostname}")
    refused = [address for address in addresses
               if is_never_allowed(address) or (not allow_private and not is_public(address))]
    if refused:
        named = parts.hostname.strip("[]") not in addresses  # an address written as the host is the tenant's own
        raise ForbiddenDestination(
            f"{parts.hostname} {'resolves to' if named else 'is'} a private, loopback or link-local address; "
            "Workset does not call those"
        )
    return addresses[0]


def send(request: HttpRequest, *, timeout: float, max_bytes: int, allow_private: bool,
         resolver: Resolver | None = None, complete: Callable[[bytes], bool] | None = None) -> HttpResponse:
    """Send one request and read the answer, all within `timeout` seconds; missing that deadline
    raises VendorTimeout, a transport failure VendorError. `complete`, handed each read's new bytes
    (every byte once, so a stream of n bytes costs n however finely it arrives), ends the reading
    when it answers True (an event stream the server keeps open after the part we wait for)."""
    deadline = _Deadline(timeout)
    address = check_destination(request.url, allow_private=allow_private,
                                resolver=_within(resolver or system_resolver, deadline, timeout))
    parts = urlsplit(request.url)
    hostname = parts.hostname or ""
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    # Host is the URL's host and port only: never the userinfo part of the netloc, never a
    # caller's own Host header.
    headers = {"User-Agent": "workset",
               **{name: value for name, value in request.headers.items() if name.lower() != "host"},
               "Host": _host_header(hostname, parts.port)}
    connection = _connection(parts.scheme, hostname, address, parts.port, deadline)
    try:
        with deadline:
            connection.connect()
            sock = connection.sock  # kept: http.client forgets it once the answer says "close"
            sock.settimeout(deadline.remaining())
            connection.request(request.method, path, body=request.body, headers=headers)
            sock.settimeout(deadline.remaining())
            response = connection.getresponse()
            body = _read_body(response, sock, deadline, max_bytes, complete)
            return HttpResponse(
                status=response.status,
                headers={name.lower(): value for name, value in response.getheaders()},
                body=body[:max_bytes],
                truncated=len(body) > max_bytes,
            )
    except (OSError, http.client.HTTPException) as error:
        # Once the watchdog has cut the socket, a read fails in whatever way it happens to
        # (EOF, reset, a bad status line): all of them are the deadline's doing.
        if isinstance(error, TimeoutError) or deadline.passed:
            raise VendorTimeout(f"{hostname} did not answer within {timeout:g} s") from error
        raise VendorError(f"could not reach {hostname}: {error.__class__.__name__}") from error
    finally:
        connection.close()


def _within(resolver: Resolver, deadline: _Deadline, timeout: float) -> Resolver:
    """`resolver` held to what is left of the deadline. A lookup cannot be interrupted (the
    system's resolver retries a name server that does not answer for tens of seconds, and a
    vendor's name server is the vendor's), so it runs on a thread of its own that is left to
    finish alone when the deadline passes first."""

    def resolve(host: str, port: int) -> list[str]:
        answer: list[list[str]] = []
        failure: list[BaseException] = []

        def look_up() -> None:
            try:
                answer.append(resolver(host, port))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting caller
                failure.append(error)

        lookup = threading.Thread(target=look_up, name="workset-resolve", daemon=True)
        lookup.start()
        try:
            lookup.join(deadline.remaining())
        except TimeoutError:
            pass
        if failure:
            raise failure[0]
        if not answer:
            raise VendorTimeout(f"{host} did not answer within {timeout:g} s (its name did not resolve in time)")
        return answer[0]

    return resolve


class _Deadline:
    """One point in time by which the whole exchange (connect, TLS, request, status line,
    headers, body) must be over.

    A socket timeout only bounds each single read, so a server sending one byte a second would
    hold a worker forever. Each blocking step gets what is left as its socket timeout, and a
    watchdog shuts the socket down when the time is up, which ends any read still blocked.
    Use as a context manager: leaving it stops the watchdog.
    """

    def __init__(self, seconds: float) -> None:
        self._at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._cut = False
        self._over = False
        self._watched: socket.socket | None = None
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> Self:
        # armed for what is left, not for the whole: the name lookup came out of the same time
        self._watchdog = threading.Timer(max(self._at - time.monotonic(), 0.0), self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        # Under the lock, so that a watchdog already running finishes before the copy closes.
        with self._lock:
            self._over = True
            if self._watched is not None:
                self._watched.close()
                self._watched = None

    @property
    def passed(self) -> bool:
        """True once the deadline has passed."""
        return self._cut or time.monotonic() >= self._at

    def remaining(self) -> float:
        """Seconds left for the next blocking step; raises TimeoutError when none are."""
        left = self._at - time.monotonic()
        if left <= 0 or self._cut:
            raise TimeoutError("the deadline has passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` down when the deadline passes (at once if it already has)."""
        with self._lock:
            if self._over:
                return
            # A copy of the descriptor, owned here: shutting it down ends the connection for every
            # descriptor of it (the TLS layer's too), and it cannot be closed, and its number
            # reused by an unrelated socket, while the watchdog is using it.
            self._watched = sock.dup()
            if self._cut:
                self._shut()

    def _expire(self) -> None:
        with self._lock:
            self._cut = True
            if not self._over:
                self._shut()

    def _shut(self) -> None:
        if self._watched is None:
            return  # still connecting: the connect's own timeout is what is left
        try:
            self._watched.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the other side has already gone


def _read_body(response: http.client.HTTPResponse, sock: socket.socket, deadline: _Deadline,
               max_bytes: int, complete: Callable[[bytes], bool] | None) -> bytes:
    """Up to max_bytes + 1 bytes of the body (one more than the cap tells that it was cut), read
    in chunks so that each read can be given what is left of the deadline."""
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes and not response.isclosed():
        sock.settimeout(deadline.remaining())
        chunk = response.read1(min(_CHUNK, max_bytes + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if complete is not None and complete(chunk):
            return b"".join(chunks)
    if deadline.passed:
        # The watchdog's shutdown looks like the end of the body; it is not.
        raise TimeoutError("the deadline passed while reading the body")
    return b"".join(chunks)


def _host_header(hostname: str, port: int | None) -> str:
    host = f"[{hostname}]" if ":" in hostname else hostname  # an IPv6 literal keeps its brackets
    return f"{host}:{port}" if port is not None else host


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked address while speaking to the URL's host name, within the
    deadline."""

    def __init__(self, host: str, address: str, port: int | None, deadline: _Deadline) -> None:
        super().__init__(host, port)
        self._address = address
        self._deadline = deadline

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self._deadline.remaining())
        self._deadline.watch(self.sock)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    """The same, with TLS verified against the host name."""

    default_port = 443

    def connect(self) -> None:
        super().connect()
        # The handshake is bounded by this timeout as a whole, and by the watchdog.
        self.sock.settimeout(self._deadline.remaining())
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.host)


def _connection(scheme: str, host: str, address: str, port: int | None,
                deadline: _Deadline) -> http.client.HTTPConnection:
    kind = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
    return kind(host, address, port, deadline)
