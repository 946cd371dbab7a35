"""Workset as its own OAuth 2.1 authorization server, so chat products connect to `/mcp` by URL
(MCP authorization, revision 2026-07-28: modelcontextprotocol.io/specification/2026-07-28/basic/
authorization).

- Discovery: protected resource metadata (RFC 9728) names this server; its metadata (RFC 8414)
  names the endpoints. The issuer is the public URL (with a trailing slash when it has no path, so
  that it reads the same however a client normalises it), and the authorization response carries
  it as `iss` (RFC 9207).
- Clients register themselves (RFC 7591); until a person consents to one, it expires in a day.
- A person consents in the console (`console/consent.py`): to an existing agent or a new one. The
  code is single-use, lives five minutes, and is bound to the client, the redirect URI, the PKCE
  S256 challenge (the only method) and the resource, which must be this `/mcp` (RFC 8707).
- Tokens: an access token `wst_<agent>_<secret>` lives an hour; a refresh token
  `wsr_<agent>_<secret>` lives 30 days from its last use and is rotated on every use. Presenting a
  refresh token already rotated away (a replay: one of the two copies leaked), or a code already
  redeemed, revokes the grant. Only hashes are stored, in the agent's partition, so the Query that
  authenticates an agent key checks an access token too (`accounts.authenticate_agent`).
- Revocation (RFC 7009) at `/oauth/revoke`, and by a person on the agent's page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import unquote_plus, urlencode, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from chalicelib import accounts, log
from chalicelib.accounts import ACCESS_TOKEN_PREFIX, hash_token
from chalicelib.config import settings
from chalicelib.errors import NotFound
from chalicelib.store import agents as agent_store
from chalicelib.store import oauth as oauth_store
from chalicelib.store.records import AgentState, AuthorizationCode, Grant, OAuthClient

REFRESH_TOKEN_PREFIX = "wsr_"
CODE_PREFIX = "wsc_"
CLIENT_SECRET_PREFIX = "wss_"
CLIENT_ID_PREFIX = "oc"
SCOPE = "mcp"  # the one scope: act as the agent at /mcp
ACCEPTED_SCOPES = frozenset({SCOPE, "offline_access"})  # offline_access is implied (refresh tokens always)
ACCESS_LIFETIME = timedelta(hours=1)
REFRESH_LIFETIME = timedelta(days=30)
CODE_LIFETIME = timedelta(minutes=5)
CODE_KEPT = timedelta(days=1)  # a redeemed code is remembered this long, so its replay revokes the grant
UNCONSENTED_CLIENT_LIFETIME = timedelta(days=1)
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")
MAX_REDIRECT_URIS = 5
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_PKCE = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 4.1 (verifier) and an S256 challenge's alphabet
_STATE = re.compile(r"[\x20-\x7e]{1,500}")


class OAuthError(Exception):
    """An error the OAuth endpoints answer as `{"error", "error_description"}` (RFC 6749 5.2)."""

    def __init__(self, error: str, description: str, *, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status

    def to_dict(self) -> dict[str, str]:
        """The JSON body."""
        return {"error": self.error, "error_description": self.description}


class UnsafeRequest(Exception):
    """An authorization request whose client or redirect URI cannot be trusted: the person is told,
    and nothing is sent to the redirect URI (RFC 6749 4.1.2.1)."""


class Redirected(Exception):
    """An authorization request refused in a way the client must hear: at its redirect URI."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


# Discovery

def issuer() -> str:
    """This authorization server's issuer identifier."""
    public = settings().public_url
    return public if urlsplit(public).path else f"{public}/"


def resource_metadata_url() -> str:
    """Where the protected resource metadata of `/mcp` is (RFC 9728 3.1, path form)."""
    return f"{settings().public_url}/.well-known/oauth-protected-resource/mcp"


def protected_resource_metadata() -> dict[str, Any]:
    """RFC 9728 metadata of `/mcp`."""
    return {"resource": settings().mcp_url, "authorization_servers": [issuer()], "scopes_supported": [SCOPE],
            "bearer_methods_supported": ["header"], "resource_name": "Workset"}


def server_metadata() -> dict[str, Any]:
    """RFC 8414 metadata of this authorization server."""
    public = settings().public_url
    return {
        "issuer": issuer(),
        "authorization_endpoint": f"{public}/console/oauth/authorize",
        "token_endpoint": f"{public}/oauth/token",
        "registration_endpoint": f"{public}/oauth/register",
        "revocation_endpoint": f"{public}/oauth/revoke",
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
    }


def challenge() -> str:
    """The `WWW-Authenticate` value of a 401 from `/mcp` (RFC 9728 5.1)."""
    return f'Bearer resource_metadata="{resource_metadata_url()}", scope="{SCOPE}"'


# Registration (RFC 7591)

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
            if problem := _redirect_problem(uri):
                raise ValueError(f"{uri[:100]!r} {problem}")
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
        if uri is not None and urlsplit(uri).scheme != "https":
            raise ValueError("client_uri must be an https URL")
        return uri


def register(payload: Any, now: datetime) -> dict[str, Any]:
    """Register a client; answer its information (the secret, for a confidential client, only here)."""
    if not isinstance(payload, dict):
        raise OAuthError("invalid_client_metadata", "the body must be a JSON object")
    try:
        request = Registration.model_validate(payload)
    except ValidationError as error:
        first = error.errors(include_url=False, include_context=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"])
        code = "invalid_redirect_uri" if field.startswith("redirect_uris") else "invalid_client_metadata"
        raise OAuthError(code, f"{field}: {first['msg'].removeprefix('Value error, ')}") from None
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


def _redirect_problem(uri: str) -> str | None:
    """Why `uri` cannot be a redirect URI: https, or http to this machine's loopback (a native
    app's listener, RFC 8252 7.3); absolute, without a fragment or credentials."""
    try:
        parts = urlsplit(uri)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 (a bad port raises)
    except ValueError:
        return "is not a URL"
    if len(uri) > 2000 or not uri.isprintable() or " " in uri:
        return "is not a usable URL"
    if parts.fragment or "#" in uri:
        return "must not carry a fragment"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials"
    if not host:
        return "must be an absolute URL"
    if parts.scheme == "https" or (parts.scheme == "http" and parts.netloc.rsplit(":", 1)[0].lower() in LOOPBACK_HOSTS):
        return None
    return "must be https (or http to localhost, 127.0.0.1 or [::1])"


# Authorization

@dataclass(frozen=True)
class Pending:
    """A checked authorization request, waiting for a person's answer."""

    client: OAuthClient
    redirect_uri: str
    code_challenge: str
    scope: str
    resource: str
    state: str | None

    @property
    def redirect_host(self) -> str:
        """Where the answer goes, as the consent page shows it."""
        return urlsplit(self.redirect_uri).netloc

    @property
    def redirect_origin(self) -> str:
        """The redirect URI's origin (the consent form may send the browser there)."""
        parts = urlsplit(self.redirect_uri)
        return f"{parts.scheme}://{parts.netloc}"

    def answer(self, **params: str) -> str:
        """The redirect URI carrying `params`, the state and the issuer."""
        extra = {**params, **({"state": self.state} if self.state is not None else {}), "iss": issuer()}
        separator = "&" if urlsplit(self.redirect_uri).query else "?"
        return f"{self.redirect_uri}{separator}{urlencode(extra)}"


def check_request(params: dict[str, str], now: datetime) -> Pending:
    """The authorization request in `params` (the query of `/console/oauth/authorize`), checked.

    Raises UnsafeRequest for an unknown client or a redirect URI it did not register (the person
    is told; nothing goes to the URI), and Redirected for every other fault (the client is told).
    """
    client = oauth_store.get_client(params.get("client_id", ""), now)
    if client is None:
        raise UnsafeRequest("This application is not registered with Workset (or its registration expired). "
                            "Connect it again from the application.")
    redirect_uri = params.get("redirect_uri") or (client.redirect_uris[0] if len(client.redirect_uris) == 1 else "")
    if not _registered(client, redirect_uri):
        raise UnsafeRequest(f"{client.client_name} asked to send the answer to an address it did not register. "
                            "Nothing was sent there.")
    state = params.get("state")
    pending = Pending(client, redirect_uri, params.get("code_challenge", ""), _scope(params.get("scope")),
                      params.get("resource") or settings().mcp_url, state if state and _STATE.fullmatch(state) else None)
    if state and pending.state is None:
        raise Redirected(pending.answer(error="invalid_request", error_description="state is not printable ASCII"))
    faults = _faults(params, pending)
    if faults:
        error, description = faults[0]
        raise Redirected(pending.answer(error=error, error_description=description))
    return pending


def _faults(params: dict[str, str], pending: Pending) -> list[tuple[str, str]]:
    faults = []
    if params.get("response_type") != "code":
        faults.append(("unsupported_response_type", "response_type must be code"))
    if params.get("code_challenge_method") != "S256" or not _PKCE.fullmatch(pending.code_challenge):
        faults.append(("invalid_request", "PKCE is required: code_challenge with code_challenge_method S256"))
    if not pending.scope:
        faults.append(("invalid_scope", f"the scope this server grants is {SCOPE!r}"))
    if pending.resource != settings().mcp_url:
        faults.append(("invalid_target", f"the resource this server grants is {settings().mcp_url}"))
    return faults


def _scope(requested: str | None) -> str:
    """The scope granted: `mcp`, whatever subset of the accepted scopes was asked; "" for any other."""
    asked = set((requested or SCOPE).split())
    return SCOPE if asked and asked <= ACCEPTED_SCOPES else ""


def _registered(client: OAuthClient, redirect_uri: str) -> bool:
    """Exact match with a registered URI; for loopback http, any port (RFC 8252 7.3)."""
    if redirect_uri in client.redirect_uris:
        return True
    try:
        asked = urlsplit(redirect_uri)
        return asked.scheme == "http" and (asked.hostname or "") in {"localhost", "127.0.0.1", "::1"} and any(
            _without_port(asked) == _without_port(urlsplit(known)) for known in client.redirect_uris)
    except ValueError:
        return False


def _without_port(parts: Any) -> tuple[str, str, str, str]:
    return parts.scheme, parts.hostname or "", parts.path, parts.query


def consent(pending: Pending, account_id: str, agent_id: str, *, actor: str, now: datetime) -> str:
    """The person's approval, for one of their account's agents: answer the redirect carrying a
    new code."""
    state = accounts.get_state(account_id, agent_id)
    if state.agent.revoked:
        raise UnsafeRequest(f"Agent {state.agent.name} is revoked; choose another agent or create one.")
    code = f"{CODE_PREFIX}{secrets.token_urlsafe(32)}"
    oauth_store.put_code(hash_token(code), AuthorizationCode(
        client_id=pending.client.client_id, redirect_uri=pending.redirect_uri, code_challenge=pending.code_challenge,
        resource=pending.resource, scope=pending.scope, account_id=account_id, agent_id=agent_id,
        grant_id=secrets.token_hex(8), consented_by=actor, expires_at=now + CODE_LIFETIME), forget_at=now + CODE_KEPT)
    oauth_store.keep_client(pending.client.client_id)
    return pending.answer(code=code)


def refusal(pending: Pending) -> str:
    """The redirect that tells the client the person said no."""
    return pending.answer(error="access_denied", error_description="the person declined")


# Tokens

def token(form: dict[str, str], authorization: str | None, now: datetime) -> dict[str, Any]:
    """The token endpoint: redeem a code, or rotate a refresh token."""
    client = _client(form, authorization, now)
    grant_type = form.get("grant_type")
    if grant_type == "authorization_code":
        return _redeem(client, form, now)
    if grant_type == "refresh_token":
        return _refresh(client, form, now)
    raise OAuthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")


def _redeem(client: OAuthClient, form: dict[str, str], now: datetime) -> dict[str, Any]:
    code_hash = hash_token(form.get("code", ""))
    code = oauth_store.get_code(code_hash) if form.get("code") else None
    if code is None or code.client_id != client.client_id:
        raise OAuthError("invalid_grant", "the code is not valid")
    if code.redeemed_at is not None:  # RFC 6749 4.1.2: a replay revokes what the code gave
        _replayed("code", code.agent_id, code.grant_id, client.client_id, now)
        raise OAuthError("invalid_grant", "the code was already used; the tokens it gave are revoked")
    if code.expires_at <= now:
        raise OAuthError("invalid_grant", "the code expired")
    if form.get("redirect_uri", code.redirect_uri) != code.redirect_uri:
        raise OAuthError("invalid_grant", "redirect_uri differs from the authorization request's")
    if form.get("resource", code.resource) != code.resource:
        raise OAuthError("invalid_target", "resource differs from the authorization request's")
    verifier = form.get("code_verifier", "")
    if not _PKCE.fullmatch(verifier) or not hmac.compare_digest(_s256(verifier), code.code_challenge):
        raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge")
    issued = _Tokens.new(code.agent_id)
    grant = Grant(grant_id=code.grant_id, client_id=client.client_id, client_name=client.client_name,
                  scope=code.scope, resource=code.resource, created_at=now, consented_by=code.consented_by,
                  access_hash=hash_token(issued.access), access_expires_at=now + ACCESS_LIFETIME,
                  refresh_hash=hash_token(issued.refresh), refresh_expires_at=now + REFRESH_LIFETIME)
    if not oauth_store.redeem(code_hash, code, grant, now):
        oauth_store.revoke_grant(code.agent_id, code.grant_id, now)
        raise OAuthError("invalid_grant", "the code was already used, or its agent was revoked")
    return issued.answer(code.scope)


def _refresh(client: OAuthClient, form: dict[str, str], now: datetime) -> dict[str, Any]:
    presented = form.get("refresh_token", "")
    state, grant = _grant_of(presented, client)
    if grant.previous_refresh_hash and hmac.compare_digest(hash_token(presented), grant.previous_refresh_hash):
        _replayed("refresh_token", state.agent.agent_id, grant.grant_id, client.client_id, now)
        raise OAuthError("invalid_grant", "the refresh token was already used; the grant is revoked")
    if not grant.active or state.agent.revoked or not grant.refresh_hash or not hmac.compare_digest(
            hash_token(presented), grant.refresh_hash) or (grant.refresh_expires_at or now) <= now:
        raise OAuthError("invalid_grant", "the refresh token is not valid")
    if form.get("resource", grant.resource) != grant.resource:
        raise OAuthError("invalid_target", "resource differs from the grant's")
    if form.get("scope") and not _scope(form["scope"]):
        raise OAuthError("invalid_scope", f"the scope this server grants is {SCOPE!r}")
    issued = _Tokens.new(state.agent.agent_id)
    if not oauth_store.rotate(state.agent.agent_id, grant.grant_id, presented_hash=grant.refresh_hash,
                              access_hash=hash_token(issued.access), access_expires_at=now + ACCESS_LIFETIME,
                              refresh_hash=hash_token(issued.refresh), refresh_expires_at=now + REFRESH_LIFETIME,
                              now=now):
        raise OAuthError("invalid_grant", "the refresh token was used meanwhile")
    return issued.answer(grant.scope)


def _replayed(what: str, agent_id: str, grant_id: str, client_id: str, now: datetime) -> None:
    """A code or refresh token came back after use: one of two copies leaked. The grant is revoked,
    logged and counted (`OAuthReplays`, alarmed)."""
    oauth_store.revoke_grant(agent_id, grant_id, now)
    log.event("oauth.replay_revoked", metrics=[log.Metric("OAuthReplays", 1)], replayed=what, agent_id=agent_id,
              grant_id=grant_id, client_id=client_id)


def revoke(form: dict[str, str], authorization: str | None, now: datetime) -> None:
    """RFC 7009: revoke the grant an access or refresh token of this client belongs to. A token that
    is unknown, expired or another client's changes nothing, and is answered the same way."""
    client = _client(form, authorization, now)
    try:
        state, grant = _grant_of(form.get("token", ""), client)
    except OAuthError:
        return
    oauth_store.revoke_grant(state.agent.agent_id, grant.grant_id, now)


def _grant_of(presented: str, client: OAuthClient) -> tuple[AgentState, Grant]:
    """The agent and this client's grant that issued `presented` (an access or refresh token, current
    or the refresh token before it)."""
    for prefix in (REFRESH_TOKEN_PREFIX, ACCESS_TOKEN_PREFIX):
        if presented.startswith(prefix):
            agent_id, _, secret = presented[len(prefix):].partition("_")
            state = agent_store.load_state(agent_id) if agent_id.isalnum() and secret else None
            digest = hash_token(presented)
            for grant in state.grants if state else ():
                known = [grant.access_hash, grant.refresh_hash, grant.previous_refresh_hash]
                if grant.client_id == client.client_id and any(
                        value and hmac.compare_digest(digest, value) for value in known):
                    assert state is not None
                    return state, grant
    raise OAuthError("invalid_grant", "the token is not valid")


def _client(form: dict[str, str], authorization: str | None, now: datetime) -> OAuthClient:
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


@dataclass(frozen=True)
class _Tokens:
    access: str
    refresh: str

    @classmethod
    def new(cls, agent_id: str) -> _Tokens:
        return cls(f"{ACCESS_TOKEN_PREFIX}{agent_id}_{secrets.token_urlsafe(32)}",
                   f"{REFRESH_TOKEN_PREFIX}{agent_id}_{secrets.token_urlsafe(32)}")

    def answer(self, scope: str) -> dict[str, Any]:
        return {"access_token": self.access, "token_type": "Bearer", "expires_in": int(ACCESS_LIFETIME.total_seconds()),
                "refresh_token": self.refresh, "scope": scope}


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


# A person's view

def revoke_grant(account_id: str, agent_id: str, grant_id: str, now: datetime) -> Grant:
    """A person revokes one client's grant to an agent of theirs: its tokens stop at once."""
    accounts.get_state(account_id, agent_id)
    if not oauth_store.revoke_grant(agent_id, grant_id, now):
        raise NotFound(f"no grant {grant_id} for agent {agent_id}")
    state = accounts.get_state(account_id, agent_id)
    return next(grant for grant in state.grants if grant.grant_id == grant_id)


def grants(account_id: str, agent_id: str) -> tuple[Grant, ...]:
    """The agent's OAuth grants, revoked ones included, oldest first."""
    return accounts.get_state(account_id, agent_id).grants

