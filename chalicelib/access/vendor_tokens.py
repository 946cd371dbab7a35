"""OAuth 2 token endpoints (RFC 6749): fetch a token by client credentials, exchange a person's
authorization code, refresh a token. Every request goes through the outbound guard like a vendor
call (resolved, refused if private or link-local, one deadline, the answer capped, no redirect
followed); the client authenticates by HTTP Basic (2.3.1). A token endpoint is as hostile as any
vendor: whatever it answers that is not a JSON token (an error, HTML, garbage, too much, nothing
in time) is a `TokenRefused` whose message says what went wrong in Workset's own words (never
the endpoint's text, which could echo what it was sent).
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote_plus, urlencode, urlsplit

from chalicelib.access.connection_auth import HEADER_SAFE
from chalicelib.base import jsontext
from chalicelib.base.config import settings
from chalicelib.base.errors import VendorError, VendorTimeout, WorksetError
from chalicelib.net import outbound

TOKEN_MAX_BYTES = 64 * 1024  # a token answer is a few hundred bytes; more is not a token answer
TOKEN_MAX_CHARS = 8192
DEFAULT_LIFETIME = timedelta(minutes=5)  # an answer without expires_in, for a token we must cache
MAX_LIFETIME = timedelta(days=1)  # an answer claiming longer is held to this (then fetched again)
# A token this close to its expiry counts as expired (the clocks of Workset and the vendor may
# differ, and a request takes time to arrive): EARLY, or a quarter of its lifetime for a token
# that lives less than four minutes. A flat minute would make every call of a vendor whose tokens
# live a minute or less fetch (or refresh, and store) a new one: a token storm at the vendor.
EARLY = timedelta(seconds=60)
EARLY_SHARE = 0.25
# OAuth error codes that say the client's credentials or grant are no longer taken (5.2)
REJECTIONS = frozenset({"invalid_client", "unauthorized_client", "invalid_grant", "invalid_scope",
                        "unsupported_grant_type"})
# the codes a message may repeat (RFC 6749 4.1.2.1 and 5.2): any other text an endpoint sends
# could be anything, the secret it was sent included
KNOWN_ERRORS = REJECTIONS | {"invalid_request", "access_denied", "unsupported_response_type", "server_error",
                             "temporarily_unavailable"}
FORM = "application/x-www-form-urlencoded"


class TokenRefused(WorksetError):
    """The token endpoint gave no usable token; the vendor was not called. `definitive` when it
    answered that the client or grant is no longer valid (a person must reconnect)."""

    code = "token_unavailable"
    status = 502
    vendor_acted = False

    def __init__(self, reason: str, *, definitive: bool = False) -> None:
        super().__init__(f"no access token: {reason}; the vendor was not called")
        self.reason = reason
        self.definitive = definitive


@dataclass(frozen=True)
class Tokens:
    """A token answer: the access token, the refresh token if one came, and when the access token
    expires (None when the answer did not say)."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None
    issued_at: datetime | None = None  # when it was asked for: its lifetime runs from then to `expires_at`

    def fresh(self, now: datetime) -> bool:
        """The access token may still be sent at `now` (`fresh`)."""
        return fresh(self.expires_at, self.issued_at, now)


def fresh(expires_at: datetime | None, issued_at: datetime | None, now: datetime) -> bool:
    """A token expiring at `expires_at` may still be sent at `now`: until EARLY before it expires,
    or EARLY_SHARE of its lifetime when that is less (a 30 s token is sent for 22.5 s, a one-hour
    token until its last minute). When it was issued is not known (stored before Workset kept it),
    EARLY; a token whose answer gave no expiry is sent until the vendor refuses it."""
    if expires_at is None:
        return True
    margin = EARLY
    if issued_at is not None:
        margin = min(EARLY, max(expires_at - issued_at, timedelta(0)) * EARLY_SHARE)
    return expires_at - margin > now


def client_credentials(oauth: dict[str, str], client_secret: str, *, timeout: float, now: datetime) -> Tokens:
    """A token for the client itself (4.4)."""
    form = {"grant_type": "client_credentials", **({"scope": oauth["scope"]} if oauth.get("scope") else {})}
    return _ask(oauth, client_secret, form, timeout=timeout, now=now)


def exchange_code(oauth: dict[str, str], client_secret: str, *, code: str, redirect_uri: str, verifier: str,
                  timeout: float, now: datetime) -> Tokens:
    """The tokens a person's authorization code stands for (4.1.3, with the PKCE verifier)."""
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": verifier}
    return _ask(oauth, client_secret, form, timeout=timeout, now=now)


def refresh(oauth: dict[str, str], client_secret: str, refresh_token: str, *, timeout: float,
            now: datetime) -> Tokens:
    """New tokens for a refresh token (6); the old refresh token is kept when no new one comes."""
    tokens = _ask(oauth, client_secret, {"grant_type": "refresh_token", "refresh_token": refresh_token},
                  timeout=timeout, now=now)
    return tokens if tokens.refresh_token else replace(tokens, refresh_token=refresh_token)


def _ask(oauth: dict[str, str], client_secret: str, form: dict[str, str], *, timeout: float,
         now: datetime) -> Tokens:
    basic = base64.b64encode(f"{quote_plus(oauth['client_id'])}:{quote_plus(client_secret)}".encode()).decode()
    request = outbound.HttpRequest("POST", oauth["token_url"], body=urlencode(form).encode(), headers={
        "Authorization": f"Basic {basic}", "Content-Type": FORM, "Accept": "application/json"})
    host = urlsplit(oauth["token_url"]).hostname
    if timeout <= 0:
        raise TokenRefused("no time was left to ask the token endpoint")
    try:
        response = outbound.send(request, timeout=timeout, max_bytes=TOKEN_MAX_BYTES,
                                 allow_private=settings().allow_private_network)
    except VendorTimeout:
        raise TokenRefused(f"the token endpoint at {host} did not answer within {timeout:g} s") from None
    except VendorError as error:
        raise TokenRefused(f"the token endpoint at {host} could not be reached ({error.code})") from None
    return _tokens(response, host or "", now)


def _tokens(response: outbound.HttpResponse, host: str, now: datetime) -> Tokens:
    where = f"the token endpoint at {host}"
    if response.truncated:
        raise TokenRefused(f"{where} answered more than {TOKEN_MAX_BYTES // 1024} KB")
    payload = _json(response.body)
    if not 200 <= response.status < 300:
        error = payload.get("error") if isinstance(payload, dict) else None
        code = error if error in KNOWN_ERRORS else None
        # only the endpoint's own word that the client or grant is refused needs a person: a bare
        # 401 or 400 (a proxy, a gateway, a vendor's outage page) is a failure for now
        definitive = response.status in (400, 401) and code in REJECTIONS
        said = f" ({code})" if code else ""
        raise TokenRefused(f"{where} answered HTTP {response.status}{said}", definitive=definitive)
    if not isinstance(payload, dict):
        raise TokenRefused(f"{where} answered something that is not a JSON object")
    access = payload.get("access_token")
    if not isinstance(access, str) or not _token(access):
        raise TokenRefused(f"{where} answered no usable access_token")
    kind = payload.get("token_type", "bearer")
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise TokenRefused(f"{where} answered a token that is not a bearer token")
    refresh_token = payload.get("refresh_token")
    return Tokens(access, refresh_token if _token(refresh_token) else None, _expiry(payload.get("expires_in"), now),
                  issued_at=now)


def _json(body: bytes) -> Any:
    try:
        return jsontext.loads(body)
    except jsontext.JsonRefused as refused:
        if refused.kind != "number":
            return None
    except (UnicodeDecodeError, ValueError):
        return None
    # an absurd number (1e999, an integer of 5,000 digits) is read, not refused: an answer that
    # rotated the refresh token and is thrown away loses the grant. Only `expires_in` is a number
    # we read, and `_expiry` holds it to MAX_LIFETIME.
    try:
        return json.loads(body, parse_int=_int)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _int(text: str) -> float:
    return int(text) if len(text) <= 18 else math.inf


def _token(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= TOKEN_MAX_CHARS and HEADER_SAFE.fullmatch(value) is not None


def _expiry(expires_in: Any, now: datetime) -> datetime | None:
    """When the token expires: `expires_in` seconds from now, held to MAX_LIFETIME; None when the
    answer did not say (or said something that is not a positive number)."""
    if isinstance(expires_in, str) and expires_in.isascii() and expires_in.isdigit():
        expires_in = _int(expires_in)  # some endpoints send it as a string
    if isinstance(expires_in, bool) or not isinstance(expires_in, int | float) or not expires_in > 0:
        return None
    return now + min(timedelta(seconds=min(float(expires_in), MAX_LIFETIME.total_seconds())), MAX_LIFETIME)
