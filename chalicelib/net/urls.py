"""The one reading of every URL Workset accepts (a tool's request, an MCP server, a webhook, an
OAuth endpoint, a client's redirect URI), so what Python sends to, what a person is shown and
where a browser goes are the same place.

Python's `urlsplit` and a browser (the WHATWG URL standard) disagree on many strings: a browser
reads `\\` as `/` (`http://evil.example\\@127.0.0.1/` goes to evil.example, `urlsplit` says
127.0.0.1), strips tabs and newlines, decodes `%65vil.com` and maps full-width letters in a host,
reads `0x7f.1` and `2130706433` as 127.0.0.1, and takes `https:evil.com` as a host. `parse`
accepts only the plain subset both read alike and refuses the rest with the reason; a test holds
it to a real WHATWG parser (`ada-url`). Non-ASCII text is refused here: callers that take it (a
tool's URL) turn it into its ASCII form first.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from chalicelib.base import sensitive

MAX_CHARS = 2000
HIDDEN = sensitive.HIDDEN  # what is shown in place of a part of a URL that may hold a key
# a tool's URL template's `{field}`, filled from the call's input (`parse(..., template=True)`)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]{0,63})\}")
DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")  # WHATWG reads a last label like this as IPv4
_DOTTED_QUAD = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
                          r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
# RFC 3986's unreserved and reserved characters, without `'` (a browser encodes it in a query)
# and without `#` (a fragment is refused) and `\`; `%` only before two hex digits.
_REST = re.compile(r"(?:[A-Za-z0-9\-._~!$&()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")
# a tool's URL template: `{field}` placeholders, and `'` (Python sends it as it is; no browser reads it)
_TEMPLATE_REST = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?{}]|%[0-9A-Fa-f]{2})*")
_DOT_SEGMENT = re.compile(r"(?:^|/)(?:\.|%2[eE]){1,2}(?:/|$)")


@dataclass(frozen=True)
class URL:
    """A URL as both Python and a browser read it."""

    text: str
    scheme: str  # lower case
    host: str  # lower case; an IPv6 address without its brackets
    port: int  # the effective port (the scheme's default when none is written)
    path: str
    query: str

    @property
    def netloc(self) -> str:
        """Host and port as a URL writes them (the port only when it is not the scheme's default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """`scheme://host[:port]`, the origin a browser sends this URL's requests to."""
        return f"{self.scheme}://{self.netloc}"

    @property
    def is_loopback(self) -> bool:
        """The host is this machine (`localhost`, 127.0.0.1 or ::1)."""
        return self.host in {"localhost", "127.0.0.1", "::1"}


def parse(value: str, *, template: bool = False) -> URL:
    """`value` read as an absolute http(s) URL with a host, no credentials and no fragment; a
    ValueError says what is wrong. `template` admits `{field}` placeholders in the path and query."""
    if not isinstance(value, str) or len(value) > MAX_CHARS:
        raise ValueError(f"must be a URL of at most {MAX_CHARS} characters")
    if not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError("must be printable ASCII without spaces (percent-encode other characters)")
    if "\\" in value:
        raise ValueError("must not contain a backslash (a browser reads it as /)")
    scheme, separator, rest = value.partition("://")
    if not separator or not _SCHEME.fullmatch(scheme):
        raise ValueError("must be an absolute URL (scheme://host/...)")
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError("must be an http or https URL")
    if "#" in rest:
        raise ValueError("must not have a fragment")
    authority, path, query = _split(rest)
    if "@" in authority:
        raise ValueError("must not carry credentials (user info before the host)")
    host, port = _host_and_port(authority, scheme)
    if not (_TEMPLATE_REST if template else _REST).fullmatch(path + query):
        raise ValueError("has characters a URL path or query cannot hold as they are (percent-encode them)")
    if _DOT_SEGMENT.search(path):
        raise ValueError("must not have . or .. path segments (a browser removes them)")
    return URL(value, scheme, host, port, path, query)


def redacted(url: str, *, path: bool = False) -> str:
    """`url` as a person or an agent is shown it when it may carry a key (an MCP server's: many
    hosted servers take theirs as `?api_key=`, or in the path): user info and every query value
    replaced by `…` (`?api_key=…`), and with `path` the path too (`https://host/…`)."""
    parts = urlsplit(url)
    netloc = parts.netloc if "@" not in parts.netloc else f"{HIDDEN}@{parts.netloc.rpartition('@')[2]}"
    shown_path = f"/{HIDDEN}" if path and parts.path.strip("/") else parts.path
    return urlunsplit((parts.scheme, netloc, shown_path, redacted_query(parts.query), HIDDEN if parts.fragment else ""))


def redacted_query(query: str) -> str:
    """A URL's query with each value replaced by `…` (`api_key=…`), its names kept; in a tool's
    URL template, the `{field}` placeholders are kept where they stand (`q={query}`,
    `filter=…{kind}`): the call's input fills them, so a person sees what goes where, and no
    value the definition itself sends."""
    shown = []
    for pair in query.split("&"):
        if pair:
            name, equals, value = pair.partition("=")
            shown.append(f"{name}={_placeholders_only(value)}" if equals else _placeholders_only(pair))
    return "&".join(shown)


def _placeholders_only(text: str) -> str:
    """`text` with every run of characters outside a `{field}` placeholder replaced by `…` (an
    empty text too: a person is not told a value is empty)."""
    parts = PLACEHOLDER.split(text)  # literal, field, literal, ..., literal
    return "".join(f"{{{part}}}" if index % 2 else HIDDEN if part else "" for index, part in enumerate(parts)) or HIDDEN


def _split(rest: str) -> tuple[str, str, str]:
    """Authority, path and query of what follows `scheme://`."""
    end = min((index for index in (rest.find("/"), rest.find("?")) if index >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    path, mark, query = tail.partition("?")
    return authority, path, query if not mark else f"?{query}"


def _host_and_port(authority: str, scheme: str) -> tuple[str, int]:
    if authority.startswith("["):
        literal, bracket, after = authority[1:].partition("]")
        try:
            address = ipaddress.IPv6Address(literal) if bracket and "%" not in literal else None
        except ValueError:
            address = None
        if address is None:
            raise ValueError("has an IPv6 host that is not a plain address in brackets")
        host, port_text = address.compressed, after
    else:
        host, colon, port = authority.partition(":")
        port_text = f"{colon}{port}"
        _check_name(host)
        host = host.lower()
    if not port_text:
        return host, DEFAULT_PORTS[scheme]
    if not port_text.startswith(":") or not _PORT.fullmatch(port_text[1:]) or int(port_text[1:]) > 65535:
        raise ValueError("has a port that is not a number from 1 to 65535")
    return host, int(port_text[1:])


def _check_name(host: str) -> None:
    """A host name of letters, digits, `-` and `_` in dot-separated labels, or a dotted IPv4
    address written plainly (a browser reads other number forms as an address too)."""
    if not host:
        raise ValueError("must name a host")
    if "%" in host:
        raise ValueError("must not percent-encode its host")
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError("has a host that is not a DNS name or an IP address")
    for label in labels:
        if label[:4].lower() == "xn--" and not _punycode(label[4:]):
            raise ValueError("has a host label that is not valid punycode")
    if _NUMBER.fullmatch(labels[-1]) and not _DOTTED_QUAD.fullmatch(host):
        raise ValueError("has a host a browser reads as an IPv4 address; write the address as four "
                         "decimal numbers")


def _punycode(text: str) -> bool:
    """`text` (an `xn--` label's rest) decodes as punycode to something that is not plain ASCII."""
    try:
        return not text.encode("ascii").decode("punycode").isascii()
    except UnicodeError:
        return False
