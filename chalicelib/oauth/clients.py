"""OAuth clients: registration (RFC 7591, open to anyone: a client names itself, so the consent
page marks it unverified) and client authentication at the token and revocation endpoints
(RFC 6749 2.3)."""

from __future__ import annotations

import base64
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from chalicelib.identity.accounts import hash_token
from chalicelib.net import urls
from chalicelib.oauth import OAuthError, limits
from chalicelib.store import oauth as oauth_store
from chalicelib.store.records import OAuthClient

CLIENT_SECRET_PREFIX = "wss_"
CLIENT_ID_PREFIX = "oc"
UNCONSENTED_CLIENT_LIFETIME = timedelta(days=1)
MAX_REDIRECT_URIS = 5


class Registration(BaseModel):
    """A client's registration request; metadata we do not use is ignored, as RFC 7591 asks."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    redirect_uris: list[str] = Field(min_length=1, max_length=MAX_REDIRECT_URIS)
    client_name: str = Field(default="Unnamed client", min_length=1, max_length=100)
    client_uri: str | None = Field(default=None, max_length=2000)
    token_endpoint_auth_method: Literal["none", "client_secret_post", "client_secret_basic"] = "client_secret_basic"
    grant_types: list[str] = Field(default_factory=lambda: ["authorization_code"], max_length=10)
    response_types: list[str] = Field(default_factory=lambda: ["code"], max_length=10)

    @field_validator("redirect_uris")
    @classmethod
    def _redirects(cls, uris: list[str]) -> list[str]:
        for uri in uris:
            try:
                redirect_uri(uri)
            except ValueError as problem:
                raise ValueError(f"{uri[:100]!r} {problem}") from None
        return uris

    @field_validator("client_name")
    @classmethod
    def _printable(cls, name: str) -> str:
        if not name.isprintable():
            raise ValueError("client_name must be printable text on one line")
        return name

    @field_validator("grant_types")
    @classmethod
    def _grants(cls, grants: list[str]) -> list[str]:
        if "authorization_code" not in grants or not set(grants) <= {"authorization_code", "refresh_token"}:
            raise ValueError("grant_types: this server grants authorization_code (and refresh_token) only")
        return grants

    @field_validator("response_types")
    @classmethod
    def _responses(cls, types: list[str]) -> list[str]:
        if set(types) != {"code"}:
            raise ValueError("response_types: this server answers `code` only")
        return types

    @field_validator("client_uri")
    @classmethod
    def _web_page(cls, uri: str | None) -> str | None:
        if uri is not None and urls.parse(uri).scheme != "https":
            raise ValueError("must be an https URL")
        return uri


def register(payload: Any, now: datetime, *, source: str | None) -> dict[str, Any]:
    """Register a client; answer its information (the secret, for a confidential client, only here).
    A valid registration counts against its source address's hourly quota and the overall one
    (`limits`); past either, nothing is stored."""
    if not isinstance(payload, dict):
        raise OAuthError("invalid_client_metadata", "the body must be a JSON object")
    try:
        request = Registration.model_validate(payload)
    except ValidationError as error:
        first = error.errors(include_url=False, include_context=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"])
        code = "invalid_redirect_uri" if field.startswith("redirect_uris") else "invalid_client_metadata"
        raise OAuthError(code, f"{field}: {first['msg'].removeprefix('Value error, ')}") from None
    limits.admit_registration(limits.source_of(source), now)
    client_id = f"{CLIENT_ID_PREFIX}{secrets.token_hex(12)}"
    secret = None if request.token_endpoint_auth_method == "none" else f"{CLIENT_SECRET_PREFIX}{secrets.token_urlsafe(32)}"
    client = OAuthClient(client_id=client_id, client_name=request.client_name,
                         redirect_uris=tuple(dict.fromkeys(request.redirect_uris)),
                         auth_method=request.token_endpoint_auth_method, created_at=now,
                         secret_hash=hash_token(secret) if secret else None, client_uri=request.client_uri)
    oauth_store.put_client(client, expires_at=now + UNCONSENTED_CLIENT_LIFETIME)
    answer: dict[str, Any] = {
        "client_id": client_id, "client_id_issued_at": int(now.timestamp()), "client_name": client.client_name,
        "redirect_uris": list(client.redirect_uris), "token_endpoint_auth_method": client.auth_method,
        "grant_types": request.grant_types, "response_types": ["code"],
    }
    if request.client_uri:
        answer["client_uri"] = request.client_uri
    if secret:
        answer.update(client_secret=secret, client_secret_expires_at=0)
    return answer


def redirect_uri(uri: str) -> urls.URL:
    """`uri` read as a redirect URI, at registration and at authorization alike: https, or http to
    this machine's loopback (a native app's listener, RFC 8252 7.3); read the same by a browser as
    by Workset (`urls.parse`: no backslash, user info, encoded or numeric-form host, non-ASCII or dot
    segments), without a fragment. A ValueError says why not."""
    url = urls.parse(uri)
    if url.scheme != "https" and not url.is_loopback:
        raise ValueError("must be https (or http to localhost, 127.0.0.1 or [::1])")
    return url


def authenticate(form: dict[str, str], authorization: str | None, now: datetime) -> OAuthClient:
    """The client the request authenticates as (RFC 6749 2.3): by HTTP Basic, by the form's
    client_secret, or (a public client) by its client_id alone."""
    client_id, secret, method = form.get("client_id", ""), form.get("client_secret"), "client_secret_post"
    if authorization and authorization[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise OAuthError("invalid_client", "the Basic credentials are not readable", status=401) from None
        basic_id, _, basic_secret = decoded.partition(":")
        client_id, secret, method = unquote_plus(basic_id), unquote_plus(basic_secret), "client_secret_basic"
    client = oauth_store.get_client(client_id, now) if client_id else None
    if client is None:
        raise OAuthError("invalid_client", "unknown client", status=401)
    if client.auth_method == "none":
        return client
    if not secret or not client.secret_hash or not hmac.compare_digest(hash_token(secret), client.secret_hash):
        raise OAuthError("invalid_client", f"the client must authenticate ({client.auth_method})", status=401)
    if method != client.auth_method:
        raise OAuthError("invalid_client", f"this client authenticates with {client.auth_method}", status=401)
    return client
