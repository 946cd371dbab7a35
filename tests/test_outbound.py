"""The outbound guard: IPv4 addresses carried inside IPv6 are judged like the IPv4 address itself,
and the vendor timeout is a deadline for the whole exchange, not for each read.

Network rule: these tests only ever connect to 127.0.0.1. Every other address is handed to
check_destination through a stub resolver, which never connects."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from chalicelib.base.errors import ForbiddenDestination, VendorTimeout
from chalicelib.net import outbound

URL = "http://vendor.example/orders"
PUBLIC_TEREDO_SERVER = ipaddress.IPv4Address("65.54.227.120")


def _embed(form: str, ipv4: str) -> str:
    """`ipv4` written inside an IPv6 address in one of the ways the guard must see through."""
    v4 = int(ipaddress.IPv4Address(ipv4))

    def v6(number: int) -> str:
        return str(ipaddress.IPv6Address(number))

    spellings = {
        "mapped dotted": f"::ffff:{ipv4}",
        "mapped hex": v6(0xFFFF << 32 | v4),
        "mapped exploded": ipaddress.IPv6Address(0xFFFF << 32 | v4).exploded,
        "mapped upper case": f"::FFFF:{ipv4}",
        "translated": f"::ffff:0:{ipv4}",
        "compatible dotted": f"::{ipv4}",
        "compatible hex": v6(v4),
        "nat64 well-known": v6(int(ipaddress.IPv6Address("64:ff9b::")) | v4),
        "nat64 local-use": v6(int(ipaddress.IPv6Address("64:ff9b:1::")) | v4),
        "6to4": v6(0x2002 << 112 | v4 << 80 | 1),
        # Teredo: 2001:0:<server>:<flags>:<port>:<client>, the client's bits inverted (RFC 4380).
        "teredo server": v6(0x20010000 << 96 | v4 << 64 | ~int(PUBLIC_TEREDO_SERVER) & 0xFFFFFFFF),
        "teredo client": v6(0x20010000 << 96 | int(PUBLIC_TEREDO_SERVER) << 64 | ~v4 & 0xFFFFFFFF),
    }
    return spellings[form]


FORMS = ["mapped dotted", "mapped hex", "mapped exploded", "mapped upper case", "translated", "compatible dotted",
         "compatible hex", "nat64 well-known", "nat64 local-use", "6to4", "teredo server", "teredo client"]


def _stub(address: str) -> outbound.Resolver:
    """A resolver that answers `address` for any host, so nothing is looked up or connected to."""
    return lambda host, port: [address]


# --- IPv4 inside IPv6 ---------------------------------------------------------------------------


def test_the_embedding_helper_writes_the_known_spellings() -> None:
    # GIVEN the loopback address WHEN it is embedded THEN the result is the textbook spelling
    assert _embed("mapped hex", "127.0.0.1") == "::ffff:7f00:1"
    assert _embed("compatible hex", "127.0.0.1") == "::7f00:1"
    assert _embed("nat64 well-known", "8.8.8.8") == "64:ff9b::808:808"
    assert _embed("6to4", "127.0.0.1") == "2002:7f00:1::1"
    assert ipaddress.IPv6Address(_embed("teredo client", "127.0.0.1")).teredo == (
        PUBLIC_TEREDO_SERVER, ipaddress.IPv4Address("127.0.0.1"))


@pytest.mark.parametrize("ipv4", ["127.0.0.1", "10.1.2.3", "192.168.0.5", "169.254.169.254"])
@pytest.mark.parametrize("form", FORMS)
def test_an_ipv6_address_carrying_a_non_public_ipv4_is_refused(form: str, ipv4: str) -> None:
    # GIVEN a host that resolves to an IPv6 address carrying a loopback, private or metadata address
    address = _embed(form, ipv4)
    # WHEN the destination is checked with private networks disallowed
    # THEN it is refused
    with pytest.raises(ForbiddenDestination, match="does not call"):
        outbound.check_destination(URL, allow_private=False, resolver=_stub(address))


@pytest.mark.parametrize("ipv4", ["169.254.169.254", "0.0.0.0", "224.0.0.1"])
@pytest.mark.parametrize("form", FORMS)
def test_an_ipv6_address_carrying_a_link_local_ipv4_is_refused_even_where_private_networks_are_allowed(
    form: str, ipv4: str
) -> None:
    # GIVEN a host that resolves to an IPv6 address carrying the metadata, unspecified or a multicast address
    address = _embed(form, ipv4)
    # WHEN the destination is checked on a deployment that allows private networks
    # THEN it is still refused
    with pytest.raises(ForbiddenDestination):
        outbound.check_destination(URL, allow_private=True, resolver=_stub(address))


@pytest.mark.parametrize("address", ["fd00:ec2::254", "fd00:ec2::253", "fd00:ec2::123"])
def test_the_cloud_metadata_service_over_ipv6_is_refused_even_where_private_networks_are_allowed(address: str) -> None:
    # GIVEN a host that resolves to AWS's instance metadata service (or its DNS or time server) at
    # its IPv6 address, which is a unique local address, not a link-local one
    # WHEN the destination is checked on a deployment that allows private networks
    # THEN it is refused like 169.254.169.254 is
    with pytest.raises(ForbiddenDestination):
        outbound.check_destination(URL, allow_private=True, resolver=_stub(address))


def test_another_unique_local_address_passes_where_private_networks_are_allowed() -> None:
    chosen = outbound.check_destination(URL, allow_private=True, resolver=_stub("fd12:3456:789a::1"))
    assert chosen == "fd12:3456:789a::1"


@pytest.mark.parametrize("address", ["::", "::1"])
def test_unspecified_and_loopback_ipv6_are_refused(address: str) -> None:
    # GIVEN a host resolving to :: or ::1 (not IPv4-compatible addresses, but themselves non-public)
    # WHEN the destination is checked THEN it is refused
    with pytest.raises(ForbiddenDestination):
        outbound.check_destination(URL, allow_private=False, resolver=_stub(address))


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "::ffff:8.8.8.8", "2002:808:808::1"])
def test_an_ipv6_address_carrying_a_public_ipv4_is_accepted(address: str) -> None:
    # GIVEN a host resolving to an IPv6 address that carries 8.8.8.8
    # WHEN the destination is checked (never sent: the tests do not reach public addresses)
    chosen = outbound.check_destination(URL, allow_private=False, resolver=_stub(address))
    # THEN that address is the one to connect to
    assert chosen == address


@pytest.mark.parametrize("url", ["ftp://user:hunter2secret@example.test/x?api_key=sk_live_abc123",
                                 "https://user:hunter2secret@example.test:99999/x?api_key=sk_live_abc123"])
def test_a_refused_url_is_named_without_its_key(url: str) -> None:
    # GIVEN a URL that is not http(s), or has no valid port, and carries a key in its user info and query
    # WHEN the destination is checked (refused before any lookup: the resolver would fail the test)
    with pytest.raises(ForbiddenDestination) as refused:
        outbound.check_destination(url, allow_private=False, resolver=_never)
    # THEN the refusal names the URL's host and query names, never the key or the password
    message = str(refused.value)
    assert "example.test" in message and "api_key=" in message
    assert "sk_live_abc123" not in message and "hunter2secret" not in message


def _never(host: str, port: int) -> list[str]:
    raise AssertionError(f"looked up {host}:{port}")


def test_a_carried_private_ipv4_passes_where_private_networks_are_allowed() -> None:
    # GIVEN a host resolving to a NAT64 address carrying 10.1.2.3
    address = _embed("nat64 well-known", "10.1.2.3")
    # WHEN the destination is checked on a deployment that allows private networks
    chosen = outbound.check_destination(URL, allow_private=True, resolver=_stub(address))
    # THEN it is accepted, as 10.1.2.3 itself would be
    assert chosen == address


# --- the deadline -------------------------------------------------------------------------------

Script = Callable[[socket.socket, threading.Event], None]
LOCAL = _stub("127.0.0.1")


@dataclass
class TinyServer:
    """One-connection HTTP server on 127.0.0.1 whose answer is a script; records the raw request."""

    url: str
    netloc: str
    requests: list[bytes] = field(default_factory=list)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _drip(conn: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send one byte every 0.1 s: each single read gets a byte well within any sane timeout."""
    for byte in data:
        if stop.wait(0.1):
            return
        conn.sendall(bytes([byte]))


@pytest.fixture
def serve() -> Iterator[Callable[[Script], TinyServer]]:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(script: Script) -> TinyServer:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.05)
        port = listener.getsockname()[1]
        server = TinyServer(url=f"http://127.0.0.1:{port}", netloc=f"127.0.0.1:{port}")

        def run() -> None:
            with listener:
                while not stop.is_set():
                    try:
                        conn, _ = listener.accept()
                    except TimeoutError:
                        continue
                    with conn:
                        conn.settimeout(10)
                        server.requests.append(_read_request(conn))
                        try:
                            script(conn, stop)
                        except OSError:
                            pass  # the client hung up, as it must at its deadline
                    return

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return server

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=5)


HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"


def _get(url: str, max_bytes: int = 1000) -> outbound.HttpResponse:
    return outbound.send(outbound.HttpRequest("GET", url), timeout=0.5, max_bytes=max_bytes, allow_private=True,
                         resolver=LOCAL)


def test_a_status_line_and_headers_dripped_past_the_deadline_time_out(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that sends its status line and headers one byte every 0.1 s, ~10 s in all
    padded = HEADERS.replace(b"\r\n\r\n", b"\r\nX-Padding: " + b"a" * 20 + b"\r\n\r\n")
    server = serve(lambda conn, stop: _drip(conn, padded + b"ok", stop))
    # WHEN a request is sent with a 0.5 s timeout
    # THEN it times out, although no single read waited more than 0.1 s
    with pytest.raises(VendorTimeout, match="did not answer within 0.5 s"):
        _get(f"{server.url}/orders")


def test_a_body_dripped_past_the_deadline_times_out(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that answers its headers at once, then drips a 50-byte body at one byte per 0.1 s
    def script(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(HEADERS.replace(b"Content-Length: 2", b"Content-Length: 50"))
        _drip(conn, b"x" * 50, stop)

    server = serve(script)
    # WHEN a request is sent with a 0.5 s timeout
    # THEN it times out instead of answering a partial body
    with pytest.raises(VendorTimeout, match="did not answer within 0.5 s"):
        _get(f"{server.url}/orders")


def test_a_fast_answer_is_read_whole(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that answers at once
    server = serve(lambda conn, stop: conn.sendall(HEADERS + b"ok"))
    # WHEN a request is sent with a 0.5 s timeout
    response = _get(f"{server.url}/orders?page=2")
    # THEN the whole answer comes back
    assert (response.status, response.body, response.truncated) == (200, b"ok", False)
    assert response.headers["content-type"] == "text/plain"
    assert server.requests[0].startswith(b"GET /orders?page=2 HTTP/1.1\r\n")


def test_the_host_header_is_host_and_port_without_userinfo(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a URL that carries userinfo
    server = serve(lambda conn, stop: conn.sendall(HEADERS + b"ok"))
    url = server.url.replace("http://", "http://alice:s3cret@") + "/orders"
    # WHEN the request is sent
    _get(url)
    # THEN the server sees Host: host:port, and the userinfo nowhere
    raw = server.requests[0]
    assert f"\r\nHost: {server.netloc}\r\n".encode() in raw
    assert b"alice" not in raw and b"s3cret" not in raw


def test_an_answer_over_the_cap_is_cut_and_marked(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that answers a 5000-byte body
    server = serve(lambda conn, stop: conn.sendall(
        HEADERS.replace(b"Content-Length: 2", b"Content-Length: 5000") + b"y" * 5000))
    # WHEN it is read with a 100-byte cap
    response = _get(f"{server.url}/big", max_bytes=100)
    # THEN the body is cut at the cap and marked as cut
    assert (response.body, response.truncated) == (b"y" * 100, True)


def test_a_chunked_answer_is_read_whole(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that answers with chunked transfer encoding
    chunked = HEADERS.replace(b"Content-Length: 2", b"Transfer-Encoding: chunked")
    server = serve(lambda conn, stop: conn.sendall(chunked + b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"))
    # WHEN it is read
    response = _get(f"{server.url}/orders")
    # THEN the chunks are joined into the body
    assert (response.body, response.truncated) == (b"abcdefg", False)


def test_reading_stops_once_the_complete_hook_says_so(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that streams one event, then keeps the connection open without ending the body
    def script(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(HEADERS.replace(b"Content-Length: 2", b"Transfer-Encoding: chunked")
                     + b"c\r\ndata: done\n\n\r\n")
        stop.wait(10)

    server = serve(script)
    seen: list[bytes] = []

    def complete(body: bytes) -> bool:
        seen.append(body)
        return body.endswith(b"\n\n")

    # WHEN it is read with a hook that recognises the end of the event
    response = outbound.send(outbound.HttpRequest("GET", f"{server.url}/events"), timeout=5, max_bytes=1000,
                             allow_private=True, resolver=LOCAL, complete=complete)
    # THEN the answer comes back with what was read, not a timeout, and the hook saw the bytes so far
    assert (response.status, response.body, response.truncated) == (200, b"data: done\n\n", False)
    assert seen[-1] == b"data: done\n\n"


def test_a_complete_hook_that_never_agrees_leaves_the_answer_whole(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN a server that answers a chunked body in two chunks and ends it
    chunked = HEADERS.replace(b"Content-Length: 2", b"Transfer-Encoding: chunked")
    server = serve(lambda conn, stop: conn.sendall(chunked + b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"))
    # WHEN it is read with a hook that never answers True
    response = outbound.send(outbound.HttpRequest("GET", f"{server.url}/orders"), timeout=0.5, max_bytes=1000,
                             allow_private=True, resolver=LOCAL, complete=lambda body: False)
    # THEN the whole body is read, as without a hook
    assert (response.body, response.truncated) == (b"abcdefg", False)


def test_the_complete_hook_is_handed_each_byte_once(serve: Callable[[Script], TinyServer]) -> None:
    # GIVEN an event stream that arrives in many small pieces (a server dribbling its answer)
    pieces = [b"data: %d\n\n" % index for index in range(400)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"
    server = serve(lambda conn, stop: conn.sendall(HEADERS.replace(b"Content-Length: 2", b"Transfer-Encoding: chunked")
                                                   + chunked))
    handed: list[int] = []

    def complete(new: bytes) -> bool:
        handed.append(len(new))
        return False

    # WHEN it is read with a hook
    response = outbound.send(outbound.HttpRequest("GET", f"{server.url}/events"), timeout=5, max_bytes=100_000,
                             allow_private=True, resolver=LOCAL, complete=complete)
    # THEN the hook saw every byte once: reading a stream of n bytes costs n, not n times the reads
    assert response.body == b"".join(pieces)
    assert len(handed) > 1 and sum(handed) == len(response.body)


def test_a_name_lookup_that_hangs_is_held_to_the_deadline() -> None:
    # GIVEN a host whose DNS never answers (a hostile vendor's own name server can stall a lookup
    # for the resolver's whole retry budget, tens of seconds)
    released = threading.Event()
    asked = threading.Event()

    def stalled(host: str, port: int) -> list[str]:
        asked.set()
        released.wait(10)
        return ["127.0.0.1"]

    try:
        # WHEN a request is sent with a 0.3 s timeout
        # THEN the lookup counts against that one deadline: the call gives up while the lookup is
        # still blocked, rather than waiting for the name server
        with pytest.raises(VendorTimeout, match="did not answer within 0.3 s"):
            outbound.send(outbound.HttpRequest("GET", URL), timeout=0.3, max_bytes=100, allow_private=True,
                          resolver=stalled)
        assert asked.is_set() and not released.is_set()
    finally:
        released.set()


def test_a_name_lookup_that_fails_is_a_vendor_error_not_a_timeout() -> None:
    # GIVEN a host whose name does not resolve
    def unknown(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    # WHEN a request is sent, THEN it says so (and is not mistaken for the deadline)
    with pytest.raises(outbound.VendorError, match="cannot resolve vendor.example") as raised:
        outbound.send(outbound.HttpRequest("GET", URL), timeout=0.3, max_bytes=100, allow_private=True,
                      resolver=unknown)
    assert not isinstance(raised.value, VendorTimeout)
