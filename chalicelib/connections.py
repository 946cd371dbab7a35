"""Connections: a vendor's credentials, typed once, stored encrypted, injected into runs, never
shown again (not in answers, previews, logs or history). The kinds are in `connection_auth`; the
OAuth token endpoints are asked through `vendor_tokens`.

A call's credential costs one GetItem (the connection, tokens included) and one KMS Decrypt. An
OAuth client-credentials token is kept in the warm instance's memory until shortly before it
expires (then one request to the token endpoint); an authorization-code token is refreshed when
it has expired or the vendor answers 401 (one token request, one KMS Encrypt, one conditional
UpdateItem on the token version: see `store/connections.py`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from chalicelib import hosts as allowed_hosts
from chalicelib import vendor_tokens
from chalicelib.clock import utcnow
from chalicelib.config import settings
from chalicelib.connection_auth import (
    AUTHORIZATION_CODE,
    CLIENT_CREDENTIALS,
    HEADER_SAFE,
    OAUTH,
    AnyAuth,
    Credential,
    bearer_token,
    static_credential,
    stored,
)
from chalicelib.errors import (
    ConnectionNeedsReconnect,
    CredentialUnavailable,
    InvalidInput,
    NotFound,
    WorksetError,
)
from chalicelib.store import connections as connection_store
from chalicelib.store import vault
from chalicelib.store.records import ACTIVE, NOT_CONNECTED, REVOKED, Connection, Page
from chalicelib.validation import NAME_PATTERN, parse
from chalicelib.vendor_tokens import TokenRefused, Tokens

CALLBACK_PATH = "/console/connections/callback"
STATE_TTL = timedelta(minutes=10)  # from Connect to the vendor's callback
EARLY = timedelta(seconds=60)  # a token this close to its expiry counts as expired
REDACTED_TOKEN = "Bearer [redacted]"
_CACHE_SIZE = 1000


class ConnectionRevoked(WorksetError):
    """The tool's connection was revoked; the call cannot carry its credentials."""

    code = "connection_revoked"
    status = 409


class NewConnection(BaseModel):
    """`{vendor, auth, hosts?}`: `hosts` (`host` or `host:port`) limits where the credential may
    ever be sent: that host and port, over https (http only where private networks are allowed);
    an OAuth token_url must be one of them too."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    vendor: str = Field(pattern=NAME_PATTERN)
    auth: AnyAuth
    hosts: list[Annotated[str, AfterValidator(allowed_hosts.checked_entry)]] = Field(default_factory=list,
                                                                                     max_length=20)


class NewAuth(BaseModel):
    """`{auth}`: a new secret for a connection, of the kind it has."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    auth: AnyAuth


def create(account_id: str, payload: Any, now: datetime) -> Connection:
    """Store a new connection; the secret is encrypted before it is written. An
    authorization-code connection is `not_connected` until a person connects it in the console."""
    request = parse(NewConnection, payload)
    _check_token_url(request.auth, request.hosts)
    kept = stored(request.auth)
    connection_id = f"cn{secrets.token_hex(8)}"
    connection = Connection(
        connection_id=connection_id, account_id=account_id, vendor=request.vendor, auth_type=request.auth.type,
        header_name=kept.header, query_name=kept.query, oauth=kept.oauth, hosts=tuple(request.hosts),
        status=NOT_CONNECTED if request.auth.type == AUTHORIZATION_CODE else ACTIVE,
        created_at=now, ciphertext=vault.encrypt(kept.secret, account_id=account_id, connection_id=connection_id),
    )
    connection_store.put(connection)
    return connection


def replace_auth(account_id: str, connection_id: str, payload: Any, now: datetime) -> Connection:
    """Give a connection a new secret of the same kind, in place (a revoked or broken one too): it
    is active again (an authorization-code one once a person connects it), keeps its id, so
    tools and approvals that name it stand, and no tool is promoted again by it."""
    connection = get(account_id, connection_id)
    request = parse(NewAuth, payload)
    if request.auth.type != connection.auth_type:
        raise InvalidInput(f"auth.type: connection {connection_id} holds a {connection.auth_type} credential; "
                           "add a new connection for another kind", field="auth.type")
    kept = stored(request.auth)
    if (kept.header, kept.query) != (connection.header_name, connection.query_name):
        raise InvalidInput(f"auth.name: connection {connection_id} sends its credential as "
                           f"{connection.header_name or connection.query_name}; add a new connection for another name",
                           field="auth.name")
    _check_token_url(request.auth, list(connection.hosts))
    status = NOT_CONNECTED if connection.auth_type == AUTHORIZATION_CODE else ACTIVE
    ciphertext = vault.encrypt(kept.secret, account_id=account_id, connection_id=connection_id)
    if not connection_store.replace_secret(account_id, connection_id, auth_type=connection.auth_type,
                                           ciphertext=ciphertext, oauth=kept.oauth, status=status, now=now):
        raise NotFound(f"no connection {connection_id}")
    return get(account_id, connection_id)


def get(account_id: str, connection_id: str) -> Connection:
    """A connection of this account; another account's is not found."""
    found = connection_store.get(account_id, connection_id)
    if found is None:
        raise NotFound(f"no connection {connection_id}")
    return found


def list_all(account_id: str, *, limit: int, cursor: str | None) -> Page:
    """The account's connections (never their secrets)."""
    return connection_store.list_all(account_id, limit=limit, cursor=cursor)


def recent_calls(account_id: str, connection_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The calls of tools through this connection, newest first (tool, agent, outcome, when)."""
    get(account_id, connection_id)
    return connection_store.recent_calls(account_id, connection_id, limit=limit, cursor=cursor)


def revoke(account_id: str, connection_id: str, now: datetime) -> Connection:
    """Revoke a connection; later runs of tools using it fail with connection_revoked."""
    get(account_id, connection_id)
    connection_store.revoke(account_id, connection_id, now)
    return get(account_id, connection_id)


def console_page(connection_id: str) -> str:
    """Where a person reconnects a connection."""
    return f"{settings().public_url}/console/connections/{connection_id}"


def check_usable(account_id: str, connection_id: str, vendor: str, url: str, *, field: str,
                 require_hosts: bool = False, headers: Iterable[str] = (), query: Iterable[str] = (),
                 headers_only: bool = False) -> None:
    """A tool may name a connection of its own account and vendor whose hosts admit its URL, and
    may set neither the header nor the query parameter the connection injects (`headers_only`:
    the request has no place for a query credential, an MCP server's)."""
    connection = connection_store.get(account_id, connection_id)
    if connection is None:
        raise InvalidInput(f"{field}: no connection {connection_id} in this account", field=field)
    if connection.vendor != vendor:
        raise InvalidInput(f"{field}: connection {connection_id} is for vendor {connection.vendor}", field=field)
    if connection.status == REVOKED:
        raise InvalidInput(f"{field}: connection {connection_id} is revoked", field=field)
    if require_hosts and not connection.hosts:
        raise InvalidInput(f"{field}: connection {connection_id} is not limited to hosts, so only an admin "
                           "may attach it to a tool", field=field)
    if not _admits(connection, url):
        raise InvalidInput(f"{field}: connection {connection_id} may only be sent to "
                           f"{allowed_hosts.describe(connection.hosts, allow_http=_allow_http())}", field=field)
    if connection.header_name and connection.header_name.lower() in {header.lower() for header in headers}:
        raise InvalidInput(f"request.headers: {connection.header_name} is the header connection {connection_id} "
                           "injects; a tool may not set it", field="request.headers")
    if connection.query_name and headers_only:
        raise InvalidInput(f"{field}: connection {connection_id} sends its key as a query parameter, which an "
                           "MCP server's requests cannot carry", field=field)
    if connection.query_name and connection.query_name in set(query):
        raise InvalidInput(f"request: {connection.query_name} is the query parameter connection {connection_id} "
                           "injects; a tool may not set it (nor take an input field of that name into the query)",
                           field="request")


def credential(account_id: str, connection_id: str, url: str, *, timeout: float | None = None,
               preview: bool = False) -> Credential:
    """What carries a connection's secret into a request to `url` (an OAuth token fetched or
    refreshed within `timeout` if need be; for a `preview` none is: it would be redacted).

    Raises ConnectionRevoked for a revoked (or vanished) connection, ConnectionNeedsReconnect for
    one a person must (re)connect, and refuses a host the connection does not admit.
    """
    connection = _usable(account_id, connection_id, url)
    if preview and connection.auth_type in OAUTH:
        return Credential("Authorization", REDACTED_TOKEN, secrets=(REDACTED_TOKEN,))
    timeout = settings().vendor_timeout_seconds if timeout is None else timeout
    if connection.auth_type == CLIENT_CREDENTIALS:
        return _client_token(connection, timeout)
    if connection.auth_type == AUTHORIZATION_CODE:
        tokens = _stored_tokens(connection)
        if connection.token_expires_at is None or connection.token_expires_at - EARLY > utcnow():
            return bearer_token(tokens.access_token)
        return _refresh(connection, tokens, timeout)
    found = static_credential(connection.auth_type, connection.header_name, connection.query_name,
                              _secret(connection))
    if found.header and not HEADER_SAFE.fullmatch(found.value):
        raise InvalidInput(f"connection {connection_id} holds a value that cannot be sent as a header")
    return found


def renew(account_id: str, connection_id: str, url: str, stale: Credential, *, timeout: float) -> Credential:
    """A new token after the vendor refused `stale` with a 401 (another call's newer token if
    there is one); raises as `credential` does, ConnectionNeedsReconnect when a refresh fails."""
    connection = _usable(account_id, connection_id, url)
    if connection.auth_type == CLIENT_CREDENTIALS:
        with _lock:
            cached = _cache.get(_cache_key(connection))
            if cached is not None and cached.access_token == stale.token:
                del _cache[_cache_key(connection)]
        return _client_token(connection, timeout)
    if connection.auth_type == AUTHORIZATION_CODE:
        tokens = _stored_tokens(connection)
        if tokens.access_token != stale.token:
            return bearer_token(tokens.access_token)
        return _refresh(connection, tokens, timeout)
    return stale


def authorization_url(account_id: str, connection_id: str, session: str, now: datetime) -> str:
    """Where to send a person to grant an authorization-code connection access: the vendor's
    authorize URL with a fresh single-use `state` (bound to this console session and connection,
    kept hashed for STATE_TTL) and a PKCE S256 challenge."""
    connection = get(account_id, connection_id)
    if connection.auth_type != AUTHORIZATION_CODE or connection.oauth is None:
        raise InvalidInput(f"connection {connection_id} is not an OAuth authorization-code connection")
    if connection.status == REVOKED:
        raise InvalidInput(f"connection {connection_id} is revoked; give it a new client secret first")
    state = f"{connection_id}.{secrets.token_urlsafe(32)}"
    connection_store.begin_authorization(account_id, connection_id, state_hash=_hash(state),
                                         session_hash=_hash(session), expires_at=now + STATE_TTL)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(_verifier(state).encode()).digest()).decode().rstrip("=")
    query = {"response_type": "code", "client_id": connection.oauth["client_id"], "redirect_uri": callback_url(),
             "state": state, "code_challenge": challenge, "code_challenge_method": "S256"}
    if connection.oauth.get("scope"):
        query["scope"] = connection.oauth["scope"]
    base = connection.oauth["authorize_url"]
    return f"{base}{'&' if urlsplit(base).query else '?'}{urlencode(query)}"


def complete_authorization(account_id: str, session: str, state: str, *, code: str | None, error: str | None,
                           now: datetime) -> Connection:
    """The vendor's callback: the state must be the connection's pending one, of this session,
    unexpired, and is used up; the code is exchanged for tokens, stored encrypted, and the
    connection is active. Anything else is InvalidInput and changes nothing but the state."""
    connection_id = state.partition(".")[0]
    refused = InvalidInput("this authorization is unknown, was used already, expired, or was started in "
                           "another console session; press Connect again")
    connection = connection_store.get(account_id, connection_id) if 0 < len(state) <= 200 else None
    if connection is None or connection.auth_type != AUTHORIZATION_CODE or connection.oauth is None:
        raise refused
    if not connection_store.take_authorization(account_id, connection_id, state_hash=_hash(state),
                                               session_hash=_hash(session), now=now):
        raise refused
    if error is not None or not code:
        said = error if error in vendor_tokens.KNOWN_ERRORS else None
        raise InvalidInput(f"the vendor did not grant access{f' ({said})' if said else ''}; nothing was changed")
    try:
        tokens = vendor_tokens.exchange_code(connection.oauth, _secret(connection), code=code,
                                             redirect_uri=callback_url(), verifier=_verifier(state),
                                             timeout=settings().vendor_timeout_seconds, now=utcnow())
    except WorksetError as failed:
        raise InvalidInput(f"the authorization could not be completed: {_reason(failed)}; nothing was changed") \
            from None
    connection_store.connect(account_id, connection_id, token_ciphertext=_seal(connection, tokens),
                             expires_at=tokens.expires_at, now=now)
    return get(account_id, connection_id)


def callback_url() -> str:
    """The one redirect URI every authorization-code connection registers with its vendor."""
    return f"{settings().public_url}{CALLBACK_PATH}"


# --- tokens -------------------------------------------------------------------------------------

_lock = threading.Lock()
_cache: OrderedDict[tuple[str, str, int], Tokens] = OrderedDict()  # client-credentials tokens of this instance


def _client_token(connection: Connection, timeout: float) -> Credential:
    key = _cache_key(connection)
    with _lock:
        cached = _cache.get(key)
    if cached is not None and cached.expires_at is not None and cached.expires_at - EARLY > utcnow():
        return bearer_token(cached.access_token)
    assert connection.oauth is not None
    now = utcnow()
    try:
        tokens = vendor_tokens.client_credentials(connection.oauth, _secret(connection), timeout=timeout, now=now)
    except TokenRefused as refused:
        if refused.definitive:
            connection_store.mark_needs_reconnect(connection.account_id, connection.connection_id,
                                                  reason=refused.reason, revision=connection.revision)
            raise _needs_reconnect(connection.connection_id, refused.reason) from None
        raise
    kept = tokens if tokens.expires_at else Tokens(tokens.access_token, None, now + vendor_tokens.DEFAULT_LIFETIME)
    with _lock:
        _cache[key] = kept
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return bearer_token(kept.access_token)


def _cache_key(connection: Connection) -> tuple[str, str, int]:
    # a new secret moves the revision on: a token of the old one is never used again
    return (connection.account_id, connection.connection_id, connection.revision)


def _refresh(connection: Connection, tokens: Tokens, timeout: float) -> Credential:
    """Refresh an authorization-code connection's tokens and keep them, unless another call did
    first (then its tokens are used). A refresh that fails marks the connection needs_reconnect."""
    assert connection.oauth is not None
    account_id, connection_id = connection.account_id, connection.connection_id
    try:
        if not tokens.refresh_token:
            raise TokenRefused("the access token expired and the vendor gave no refresh token", definitive=True)
        fresh = vendor_tokens.refresh(connection.oauth, _secret(connection), tokens.refresh_token,
                                      timeout=timeout, now=utcnow())
    except WorksetError as failed:
        if isinstance(failed, CredentialUnavailable):
            raise  # KMS failing now says nothing of the grant
        reason = _reason(failed)
        if connection_store.mark_needs_reconnect(account_id, connection_id, reason=reason,
                                                 read_version=connection.token_version):
            raise _needs_reconnect(connection_id, reason) from None
        return _newer(connection)
    if connection_store.save_tokens(account_id, connection_id, token_ciphertext=_seal(connection, fresh),
                                    expires_at=fresh.expires_at, read_version=connection.token_version):
        return bearer_token(fresh.access_token)
    return _newer(connection)


def _newer(read: Connection) -> Credential:
    """Another call changed the tokens since `read` was read: its tokens, if they are usable."""
    connection = _usable(read.account_id, read.connection_id, None, consistent=True)
    newer = connection.auth_type == AUTHORIZATION_CODE and connection.token_version > read.token_version
    if newer and (connection.token_expires_at is None or connection.token_expires_at > utcnow()):
        return bearer_token(_stored_tokens(connection).access_token)
    raise _needs_reconnect(read.connection_id, "its token could not be refreshed")


def _stored_tokens(connection: Connection) -> Tokens:
    if not connection.token_ciphertext:
        raise _needs_reconnect(connection.connection_id, "no person has connected it yet")
    held = json.loads(_decrypt(connection, connection.token_ciphertext, purpose="tokens"))
    return Tokens(held["access_token"], held.get("refresh_token"), connection.token_expires_at)


def _seal(connection: Connection, tokens: Tokens) -> bytes:
    plain = json.dumps({"access_token": tokens.access_token, "refresh_token": tokens.refresh_token})
    return vault.encrypt(plain, account_id=connection.account_id, connection_id=connection.connection_id,
                         purpose="tokens")


# --- shared -------------------------------------------------------------------------------------


def _usable(account_id: str, connection_id: str, url: str | None, *, consistent: bool = False) -> Connection:
    connection = connection_store.get(account_id, connection_id, consistent=consistent)
    if connection is None or connection.status == REVOKED:
        raise ConnectionRevoked(f"connection {connection_id} was revoked; the tool cannot run with it")
    if connection.status == NOT_CONNECTED:
        raise _needs_reconnect(connection_id, "no person has connected it yet")
    if connection.status != ACTIVE:
        raise _needs_reconnect(connection_id, connection.status_reason or "the vendor no longer takes its credential")
    if url is not None and not _admits(connection, url):
        raise InvalidInput(f"connection {connection_id} may not be sent to {urlsplit(url).netloc}")
    return connection


def _needs_reconnect(connection_id: str, reason: str) -> ConnectionNeedsReconnect:
    return ConnectionNeedsReconnect(f"connection {connection_id} needs a person to reconnect it ({reason}); "
                                    f"reconnect it at {console_page(connection_id)}")


def _reason(error: WorksetError) -> str:
    """Why a token request failed, in Workset's words only."""
    return error.reason if isinstance(error, TokenRefused) else error.message


def _secret(connection: Connection) -> str:
    return _decrypt(connection, connection.ciphertext)


def _decrypt(connection: Connection, ciphertext: bytes, *, purpose: str = "") -> str:
    try:
        return vault.decrypt(ciphertext, account_id=connection.account_id, connection_id=connection.connection_id,
                             purpose=purpose)
    except (BotoCoreError, ClientError) as error:
        reason = error.response["Error"].get("Code", "error") if isinstance(error, ClientError) else "unreachable"
        raise CredentialUnavailable(f"the secret of connection {connection.connection_id} could not be decrypted "
                                    f"now (KMS: {reason}); the vendor was not called") from error


def _check_token_url(auth: Any, hosts: list[str]) -> None:
    """An OAuth token_url goes where the connection's credential may go: one of its hosts, if it
    has hosts."""
    token_url = getattr(auth, "token_url", None)
    if token_url and hosts and not allowed_hosts.admits(hosts, token_url, allow_http=_allow_http()):
        raise InvalidInput(f"auth.token_url: the token endpoint must be one of the connection's hosts "
                           f"({allowed_hosts.describe(hosts, allow_http=_allow_http())})", field="auth.token_url")


def _verifier(state: str) -> str:
    """The PKCE code verifier of a state: derived, not stored (43 characters of base64url)."""
    key = hashlib.sha256(b"workset-pkce\n" + settings().console_secret.encode()).digest()
    return base64.urlsafe_b64encode(hmac.new(key, state.encode(), hashlib.sha256).digest()).decode().rstrip("=")


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _admits(connection: Connection, url: str) -> bool:
    """A connection without hosts (only an admin may attach one) goes wherever its tools go."""
    return not connection.hosts or allowed_hosts.admits(connection.hosts, url, allow_http=_allow_http())


def _allow_http() -> bool:
    return settings().allow_private_network
