"""Client ID Metadata Documents (MCP 2026-07-28, basic/authorization/client-registration, "Client
ID Metadata Documents"; draft-ietf-oauth-client-id-metadata-document-00, which that page cites):
a client whose `client_id` is an https URL describes itself in the JSON document at that URL, so
it needs no registration. Workset reads the document when a person is asked to consent (the
consent page is behind the console's sign-in, so a stranger cannot make Workset fetch anything):

- the URL: https, a host, a path other than `/`, no user info, no fragment, no dot segments
  (draft section 3), read as every URL is (`urls.parse`). Where private networks are allowed
  (the local stages) http is admitted too, for a document served on this machine.
- the fetch goes through the outbound guard (`outbound.send`): the host is resolved and a
  private, loopback or link-local address refused before any connection (draft 6.5, SSRF); one
  deadline for the whole exchange, the answer capped at 5 KB (draft 6.6), redirects never
  followed (draft 4: anything but 200 with a JSON content type is an error).
- the document: a JSON object whose `client_id` equals the URL, string for string (draft 4.1,
  no normalisation), with redirect URIs each a valid one (`clients.redirect_uri`), and no shared
  secret: `token_endpoint_auth_method` is `none` and `client_secret` is absent (draft 4.1; a
  private_key_jwt client is refused, Workset has no JWKS support). The redirect URI of an
  authorization request must be one of them exactly (no loopback port leniency).
- the cache: per process, at most `CACHE_ENTRIES` documents (least recently used dropped), each
  kept as long as its `Cache-Control: max-age` (less its `Age`) or `Expires` says, never past a
  day, not at all for `no-store` or `no-cache`, five minutes when it says nothing (draft 4.4,
  RFC 9111). A failed fetch is not cached.

The token and revocation endpoints never fetch: a public client proves nothing there beyond its
id, and the code or grant it presents is bound to that id already (`public_client`).

A client that names nothing (no `client_name`, or not cached where its code is redeemed) is named
by its whole client ID URL, never by its host alone: a host is attacker-chosen text that a person
reads as a brand ("claude.ai.example"), a URL reads as the address it is. Wherever a person sees
such a client, the host is shown as what identified it (`identified_by`), as on the consent page.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from pydantic import Field, ValidationError

from chalicelib.base import jsontext
from chalicelib.base.config import settings
from chalicelib.base.errors import ForbiddenDestination, VendorError, VendorTimeout
from chalicelib.net import outbound, urls
from chalicelib.oauth.clients import Registration
from chalicelib.store.records import OAuthClient

FETCH_TIMEOUT_SECONDS = 5.0
MAX_DOCUMENT_BYTES = 5 * 1024  # draft 6.6's recommended ceiling
MAX_REDIRECT_URIS = 10
CACHE_ENTRIES = 256
DEFAULT_FRESHNESS = timedelta(minutes=5)
MAX_FRESHNESS = timedelta(days=1)
_JSON_TYPES = ("application/json",)


class DocumentRefused(ValueError):
    """A client ID URL whose document cannot identify a client; the message says why, for a person."""


class MetadataDocument(Registration):
    """A client's metadata document: the registration metadata (RFC 7591) plus its own `client_id`;
    properties Workset does not use are ignored."""

    client_id: str = Field(max_length=urls.MAX_CHARS)
    client_name: str = Field(default="", max_length=100)  # the MCP page requires it; absent, the URL names it
    redirect_uris: list[str] = Field(min_length=1, max_length=MAX_REDIRECT_URIS)
    token_endpoint_auth_method: Literal["none"] = "none"


@dataclass(frozen=True)
class _Cached:
    client: OAuthClient
    fresh_until: datetime


_cache: OrderedDict[str, _Cached] = OrderedDict()
_lock = threading.Lock()


def is_document_id(client_id: str) -> bool:
    """True for a client_id that is a URL (so names a metadata document, never a registration:
    registered ids are `oc` and hex)."""
    return "://" in client_id


def identified_by(client_id: str) -> str | None:
    """The host (and port, when not the default) a metadata-document client is identified by."""
    if not is_document_id(client_id):
        return None
    try:
        return urls.parse(client_id).netloc
    except ValueError:
        return None


def client_id_url(client_id: str) -> urls.URL:
    """`client_id` read as a client identifier URL (draft section 3); DocumentRefused says why not."""
    try:
        url = urls.parse(client_id)
    except ValueError as problem:
        raise DocumentRefused(f"its client ID {problem}") from None
    if url.scheme != "https" and not settings().allow_private_network:
        raise DocumentRefused("its client ID must be an https URL")
    if url.path in ("", "/"):
        raise DocumentRefused("its client ID must have a path (https://host/path)")
    return url


def resolve(client_id: str, now: datetime) -> OAuthClient:
    """The client a metadata document describes, from the cache while it is fresh, else fetched
    and checked; DocumentRefused says why it cannot be used."""
    url = client_id_url(client_id)
    with _lock:
        cached = _cache.get(client_id)
        if cached is not None and cached.fresh_until > now:
            _cache.move_to_end(client_id)
            return cached.client
    response = _fetch(url)
    client = _client(client_id, response, now)
    freshness = _freshness(response.headers, now)
    with _lock:
        _cache.pop(client_id, None)
        if freshness > timedelta(0):
            _cache[client_id] = _Cached(client, now + freshness)
            while len(_cache) > CACHE_ENTRIES:
                _cache.popitem(last=False)
    return client


def public_client(client_id: str, now: datetime) -> OAuthClient | None:
    """A metadata-document client as the token and revocation endpoints know it, without a fetch:
    public (it authenticates by its id alone, which the code or grant it presents is bound to),
    named as its cached document names it, else by its whole URL (never its bare host). None for
    an id that is not a client identifier URL."""
    try:
        client_id_url(client_id)
    except DocumentRefused:
        return None
    with _lock:
        cached = _cache.get(client_id)
    if cached is not None:
        return cached.client
    return OAuthClient(client_id=client_id, client_name=client_id, redirect_uris=(), auth_method="none",
                       created_at=now, dynamic=False)


def forget() -> None:
    """Empty the cache (tests; a process keeps it otherwise)."""
    with _lock:
        _cache.clear()


def _fetch(url: urls.URL) -> outbound.HttpResponse:
    request = outbound.HttpRequest("GET", url.text, headers={"Accept": "application/json"})
    try:
        response = outbound.send(request, timeout=FETCH_TIMEOUT_SECONDS, max_bytes=MAX_DOCUMENT_BYTES,
                                 allow_private=settings().allow_private_network)
    except ForbiddenDestination:
        raise DocumentRefused(f"{url.host} is a private, loopback or link-local address; Workset does "
                              "not fetch from those") from None
    except VendorTimeout:
        raise DocumentRefused(f"{url.netloc} did not answer within {FETCH_TIMEOUT_SECONDS:g} s") from None
    except VendorError:
        raise DocumentRefused(f"{url.netloc} could not be reached") from None
    if response.status != 200:
        moved = " (a redirect, which Workset does not follow)" if 300 <= response.status < 400 else ""
        raise DocumentRefused(f"{url.netloc} answered HTTP {response.status}{moved} for its metadata document")
    if response.truncated:
        raise DocumentRefused(f"its metadata document is larger than {MAX_DOCUMENT_BYTES // 1024} KB")
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in _JSON_TYPES and not (media.startswith("application/") and media.endswith("+json")):
        raise DocumentRefused("its metadata document is not served as application/json")
    return response


def _client(client_id: str, response: outbound.HttpResponse, now: datetime) -> OAuthClient:
    try:
        payload = jsontext.loads(response.body)
    except jsontext.JsonRefused as refused:
        raise DocumentRefused(f"its metadata document is not JSON ({refused.reason})") from None
    if not isinstance(payload, dict):
        raise DocumentRefused("its metadata document is not a JSON object")
    if "client_secret" in payload or "client_secret_expires_at" in payload:
        raise DocumentRefused("its metadata document holds a client secret, which a public document cannot")
    try:
        document = MetadataDocument.model_validate(payload)
    except ValidationError as error:
        raise DocumentRefused(f"its metadata document is not valid ({_first(error)})") from None
    if document.client_id != client_id:
        raise DocumentRefused("its metadata document names another client_id than the URL it is at")
    return OAuthClient(client_id=client_id, client_name=document.client_name or client_id,
                       redirect_uris=tuple(dict.fromkeys(document.redirect_uris)), auth_method="none",
                       created_at=now, client_uri=document.client_uri, dynamic=False)


def _first(error: ValidationError) -> str:
    first = error.errors(include_url=False, include_context=False, include_input=False)[0]
    field = ".".join(str(part) for part in first["loc"])
    if field == "token_endpoint_auth_method":
        return "token_endpoint_auth_method: must be none (Workset accepts public metadata-document clients)"
    return f"{field}: {first['msg'].removeprefix('Value error, ')}"


def _freshness(headers: dict[str, str], now: datetime) -> timedelta:
    """How long a document may be reused (RFC 9111 4.2.1): max-age less Age, else Expires less
    Date, else DEFAULT_FRESHNESS; nothing for no-store or no-cache; never past MAX_FRESHNESS."""
    directives = _directives(headers.get("cache-control", ""))
    if "no-store" in directives or "no-cache" in directives:
        return timedelta(0)
    max_age = _seconds(directives.get("max-age"))
    if max_age is not None:
        freshness = timedelta(seconds=max(0, max_age - (_seconds(headers.get("age")) or 0)))
    elif "expires" in headers:
        expires, date = _http_date(headers["expires"]), _http_date(headers.get("date", ""))
        freshness = expires - (date or now) if expires is not None else timedelta(0)  # a bad Expires: stale
    else:
        freshness = DEFAULT_FRESHNESS
    return max(timedelta(0), min(freshness, MAX_FRESHNESS))


def _directives(value: str) -> dict[str, str | None]:
    directives: dict[str, str | None] = {}
    for part in value.split(","):
        name, equals, argument = part.strip().partition("=")
        if name:
            directives.setdefault(name.lower(), argument.strip().strip('"') if equals else None)
    return directives


def _seconds(value: Any) -> int | None:
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 10:
        return None
    return int(value)


def _http_date(value: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else None
