"""The kinds of credential a connection holds, as the admin API takes them, and the `Credential`
a call carries (a header, or a query parameter), with the values no answer may show.

| type | body | sent as |
|---|---|---|
| `bearer` | `token` | `Authorization: Bearer <token>` |
| `header` | `name`, `value` | `<name>: <value>` |
| `basic` | `username`, `password` | `Authorization: Basic base64(username:password)` |
| `query` | `name`, `value` | `?<name>=<value>` on every request |
| `oauth2_client_credentials` | `token_url`, `client_id`, `client_secret`, `scope?` | `Authorization: Bearer <fetched token>` |
| `oauth2_authorization_code` | `authorize_url`, `token_url`, `client_id`, `client_secret`, `scopes` | `Authorization: Bearer <token a person granted>` |
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from chalicelib.base.config import settings
from chalicelib.net import outbound, urls

BEARER = "bearer"
HEADER = "header"
BASIC = "basic"
QUERY = "query"
CLIENT_CREDENTIALS = "oauth2_client_credentials"
AUTHORIZATION_CODE = "oauth2_authorization_code"
OAUTH = frozenset({CLIENT_CREDENTIALS, AUTHORIZATION_CODE})

HEADER_SAFE = re.compile(r"[\x20-\x7e]+")  # what a header's value may hold (and a token we put in one)
NO_CONTROLS = re.compile(r"[^\x00-\x1f\x7f]+")
SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,200}")  # RFC 6749 3.3
SECRET = Field(min_length=1, max_length=4096)


def _header_safe(value: SecretStr) -> SecretStr:
    if not HEADER_SAFE.fullmatch(value.get_secret_value()):
        raise ValueError("must be printable ASCII (it is sent in a header)")
    return value


def _text(value: SecretStr) -> SecretStr:
    if not NO_CONTROLS.fullmatch(value.get_secret_value()):
        raise ValueError("may not hold control characters")
    return value


def checked_endpoint(value: str) -> str:
    """An OAuth endpoint: an absolute https URL (http only where private networks are allowed),
    with a host, no user info and no fragment, read as every URL is (`urls.parse`)."""
    url = urls.parse(value)
    if url.scheme != "https" and not settings().allow_private_network:
        raise ValueError("must be an https URL")
    return value


class _Auth(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class BearerAuth(_Auth):
    type: Literal["bearer"]
    token: SecretStr = SECRET

    _token = field_validator("token")(_header_safe)


class HeaderAuth(_Auth):
    type: Literal["header"]
    name: str = Field(pattern=r"^[A-Za-z0-9-]{1,64}$")
    value: SecretStr = SECRET

    _value = field_validator("value")(_header_safe)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if outbound.is_client_header(value) or value.lower() == "content-type":  # calls send JSON bodies
            raise ValueError(f"{value} is set by Workset and cannot carry a credential")
        return value


class BasicAuth(_Auth):
    type: Literal["basic"]
    username: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f:]+$")
    password: SecretStr = Field(min_length=1, max_length=1024)

    _password = field_validator("password")(_text)


class QueryAuth(_Auth):
    type: Literal["query"]
    name: str = Field(pattern=r"^[A-Za-z0-9_.~\[\]-]{1,64}$")
    value: SecretStr = SECRET

    _value = field_validator("value")(_text)


class ClientCredentialsAuth(_Auth):
    type: Literal["oauth2_client_credentials"]
    token_url: str
    client_id: str = Field(min_length=1, max_length=512, pattern=r"^[\x20-\x7e]+$")
    client_secret: SecretStr = SECRET
    scope: str | None = Field(default=None, max_length=2000)

    _client_secret = field_validator("client_secret")(_text)
    _token_url = field_validator("token_url")(checked_endpoint)

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str | None) -> str | None:
        if value is not None and not all(SCOPE_TOKEN.fullmatch(token) for token in value.split(" ")):
            raise ValueError("is space-separated scope tokens (printable ASCII, no quote or backslash)")
        return value


class AuthorizationCodeAuth(_Auth):
    type: Literal["oauth2_authorization_code"]
    authorize_url: str
    token_url: str
    client_id: str = Field(min_length=1, max_length=512, pattern=r"^[\x20-\x7e]+$")
    client_secret: SecretStr = SECRET
    scopes: list[Annotated[str, Field(pattern=f"^{SCOPE_TOKEN.pattern}$")]] = Field(default_factory=list, max_length=50)

    _client_secret = field_validator("client_secret")(_text)
    _urls = field_validator("authorize_url", "token_url")(checked_endpoint)


AnyAuth = Annotated[BearerAuth | HeaderAuth | BasicAuth | QueryAuth | ClientCredentialsAuth | AuthorizationCodeAuth,
                    Field(discriminator="type")]


@dataclass(frozen=True)
class Stored:
    """What the store keeps of an auth body: the secret (to encrypt), where it goes, the OAuth
    settings (no secret among them)."""

    secret: str = field(repr=False)
    header: str = ""
    query: str = ""
    oauth: dict[str, str] | None = None


def stored(auth: Any) -> Stored:
    """The parts of a parsed auth body the store keeps."""
    if isinstance(auth, BearerAuth):
        return Stored(auth.token.get_secret_value(), header="Authorization")
    if isinstance(auth, HeaderAuth):
        return Stored(auth.value.get_secret_value(), header=auth.name)
    if isinstance(auth, BasicAuth):
        return Stored(f"{auth.username}:{auth.password.get_secret_value()}", header="Authorization")
    if isinstance(auth, QueryAuth):
        return Stored(auth.value.get_secret_value(), query=auth.name)
    if isinstance(auth, ClientCredentialsAuth):
        oauth = {"token_url": auth.token_url, "client_id": auth.client_id, "scope": auth.scope or ""}
        return Stored(auth.client_secret.get_secret_value(), header="Authorization", oauth=oauth)
    assert isinstance(auth, AuthorizationCodeAuth)
    oauth = {"authorize_url": auth.authorize_url, "token_url": auth.token_url, "client_id": auth.client_id,
             "scope": " ".join(auth.scopes)}
    return Stored(auth.client_secret.get_secret_value(), header="Authorization", oauth=oauth)


@dataclass(frozen=True)
class Credential:
    """What a run carries: a header (`header`: `value`), or a query parameter (`query`=`value`);
    `secrets` are what answers must never show (the value and the bare secrets inside it).
    `token` is the OAuth access token sent, when a vendor's 401 may be answered by a new one."""

    header: str
    value: str = field(repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    query: str = ""
    token: str | None = field(default=None, repr=False)

    @property
    def renewable(self) -> bool:
        """True when a vendor's 401 may be met by fetching a new token and trying once more."""
        return self.token is not None

    def apply(self, url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        """`url` and `headers` carrying the credential (replacing whatever the request put where it goes)."""
        if self.query:
            parts = urlsplit(url)
            # the request's own parameters as they were encoded, less any of the credential's name
            kept = [pair for pair in parts.query.split("&") if pair and _name(pair) != self.query]
            query = "&".join([*kept, urlencode([(self.query, self.value)])])
            return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment)), dict(headers)
        sent = {name: value for name, value in headers.items() if name.lower() != self.header.lower()}
        sent[self.header] = self.value
        return url, sent


def _name(pair: str) -> str:
    """The decoded name of one `name=value` pair of a query string."""
    decoded = parse_qsl(pair, keep_blank_values=True)
    return decoded[0][0] if decoded else pair


def static_credential(auth_type: str, header: str, query: str, secret: str) -> Credential:
    """The credential of a bearer, header, basic or query connection from its decrypted secret."""
    if auth_type == BEARER:
        return Credential(header, f"Bearer {secret}", secrets=(f"Bearer {secret}", secret))
    if auth_type == BASIC:
        token = base64.b64encode(secret.encode()).decode()
        password = secret.partition(":")[2]
        return Credential(header, f"Basic {token}", secrets=(f"Basic {token}", token, secret, password))
    if auth_type == QUERY:
        return Credential("", secret, secrets=(secret,), query=query)
    return Credential(header, secret, secrets=(secret,))


def bearer_token(token: str) -> Credential:
    """An OAuth access token as the vendor gets it."""
    return Credential("Authorization", f"Bearer {token}", secrets=(f"Bearer {token}", token), token=token)
