"""What a call carries from its connection: the static credential (decrypted per call), or an
OAuth token: a client-credentials token fetched and kept in the warm instance until shortly
before it expires (`vendor_tokens.fresh`: a minute, or a quarter of a short-lived token's life);
an authorization-code token refreshed as shortly before it expires, or when the vendor answered
401, by one call at a time (`token_refresh`, which draws the guard). And the console's Connect,
which first obtains an authorization-code connection's tokens (state and PKCE S256).

A call's credential costs one GetItem (the connection, tokens included) and one KMS Decrypt. The
connections themselves (create, reconnect in place, revoke, what a tool may name) are
`connections`; the kinds are `connection_auth`; the token endpoints are asked through
`vendor_tokens`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from datetime import datetime, timedelta
from urllib.parse import urlencode, urlsplit

from chalicelib.access import connections, token_refresh, vendor_tokens
from chalicelib.access.connection_auth import (
    AUTHORIZATION_CODE,
    CLIENT_CREDENTIALS,
    HEADER_SAFE,
    OAUTH,
    Credential,
    bearer_token,
    static_credential,
)
from chalicelib.access.vendor_tokens import TokenRefused, Tokens
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import InvalidInput, WorksetError
from chalicelib.identity.accounts import hash_token, s256
from chalicelib.store import connections as connection_store
from chalicelib.store.records import REVOKED, Connection

CALLBACK_PATH = "/console/connections/callback"
STATE_TTL = timedelta(minutes=10)  # from Connect to the vendor's callback
REDACTED_TOKEN = "Bearer [redacted]"
_CACHE_SIZE = 1000  # client-credentials tokens one warm instance keeps


def credential(account_id: str, connection_id: str, url: str, *, timeout: float | None = None,
               preview: bool = False) -> Credential:
    """What carries a connection's secret into a request to `url` (an OAuth token fetched or
    refreshed within `timeout` if need be; for a `preview` none is: it would be redacted).

    Raises ConnectionRevoked for a revoked (or vanished) connection, ConnectionNeedsReconnect for
    one a person must (re)connect, and refuses a host the connection does not admit.
    """
    connection = connections.usable(account_id, connection_id, url)
    if preview and connection.auth_type in OAUTH:
        return Credential("Authorization", REDACTED_TOKEN, secrets=(REDACTED_TOKEN,))
    timeout = settings().vendor_timeout_seconds if timeout is None else timeout
    if connection.auth_type == CLIENT_CREDENTIALS:
        return _client_token(connection, timeout)
    if connection.auth_type == AUTHORIZATION_CODE:
        if vendor_tokens.fresh(connection.token_expires_at, connection.token_issued_at, utcnow()):
            return bearer_token(token_refresh.stored_tokens(connection).access_token)
        return token_refresh.refresh(connection, timeout)
    found = static_credential(connection.auth_type, connection.header_name, connection.query_name,
                              connections.secret(connection))
    if found.header and not HEADER_SAFE.fullmatch(found.value):
        raise InvalidInput(f"connection {connection_id} holds a value that cannot be sent as a header")
    return found


def renew(account_id: str, connection_id: str, url: str, stale: Credential, *, timeout: float) -> Credential:
    """A new token after the vendor refused `stale` with a 401 (another call's newer token if
    there is one); raises as `credential` does."""
    connection = connections.usable(account_id, connection_id, url)
    if connection.auth_type == CLIENT_CREDENTIALS:
        with _lock:
            cached = _cache.get(_cache_key(connection))
            if cached is not None and cached.access_token == stale.token:
                del _cache[_cache_key(connection)]
        return _client_token(connection, timeout)
    if connection.auth_type == AUTHORIZATION_CODE:
        tokens = token_refresh.stored_tokens(connection)
        if tokens.access_token != stale.token:
            return bearer_token(tokens.access_token)
        return token_refresh.refresh(connection, timeout)
    return stale


def authorization_url(account_id: str, connection_id: str, session: str, now: datetime) -> str:
    """Where to send a person to grant an authorization-code connection access: the vendor's
    authorize URL with a fresh single-use `state` (bound to this console session and connection,
    kept hashed for STATE_TTL) and a PKCE S256 challenge."""
    connection = connections.get(account_id, connection_id)
    if connection.auth_type != AUTHORIZATION_CODE or connection.oauth is None:
        raise InvalidInput(f"connection {connection_id} is not an OAuth authorization-code connection")
    if connection.status == REVOKED:
        raise InvalidInput(f"connection {connection_id} is revoked; give it a new client secret first")
    state = f"{connection_id}.{secrets.token_urlsafe(32)}"
    connection_store.begin_authorization(account_id, connection_id, state_hash=hash_token(state),
                                         session_hash=hash_token(session), expires_at=now + STATE_TTL)
    challenge = s256(_verifier(state))
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
    if not connection_store.take_authorization(account_id, connection_id, state_hash=hash_token(state),
                                               session_hash=hash_token(session), now=now):
        raise refused
    if error is not None or not code:
        said = error if error in vendor_tokens.KNOWN_ERRORS else None
        raise InvalidInput(f"the vendor did not grant access{f' ({said})' if said else ''}; nothing was changed")
    try:
        tokens = vendor_tokens.exchange_code(connection.oauth, connections.secret(connection), code=code,
                                             redirect_uri=callback_url(), verifier=_verifier(state),
                                             timeout=settings().vendor_timeout_seconds, now=utcnow())
    except WorksetError as failed:
        raise InvalidInput(f"the authorization could not be completed: {_reason(failed)}; nothing was changed") \
            from None
    connection_store.connect(account_id, connection_id, token_ciphertext=token_refresh.seal(connection, tokens),
                             expires_at=tokens.expires_at, issued_at=tokens.issued_at, now=now)
    return connections.get(account_id, connection_id)


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
    if cached is not None and cached.expires_at is not None and cached.fresh(utcnow()):
        return bearer_token(cached.access_token)
    assert connection.oauth is not None
    now = utcnow()
    try:
        tokens = vendor_tokens.client_credentials(connection.oauth, connections.secret(connection), timeout=timeout, now=now)
    except TokenRefused as refused:
        if refused.definitive:
            connection_store.mark_needs_reconnect(connection.account_id, connection.connection_id,
                                                  reason=refused.reason, revision=connection.revision)
            raise connections.needs_reconnect(connection.connection_id, refused.reason) from None
        raise
    kept = tokens if tokens.expires_at else Tokens(tokens.access_token, None, now + vendor_tokens.DEFAULT_LIFETIME,
                                                   issued_at=now)
    with _lock:
        _cache[key] = kept
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return bearer_token(kept.access_token)


def _cache_key(connection: Connection) -> tuple[str, str, int]:
    # a new secret moves the revision on: a token of the old one is never used again
    return (connection.account_id, connection.connection_id, connection.revision)


def _reason(error: WorksetError) -> str:
    """Why a token request failed, in Workset's words only."""
    return error.reason if isinstance(error, TokenRefused) else error.message


def _verifier(state: str) -> str:
    """The PKCE code verifier of a state: derived, not stored (43 characters of base64url)."""
    key = hashlib.sha256(b"workset-pkce\n" + settings().console_secret.encode()).digest()
    return base64.urlsafe_b64encode(hmac.new(key, state.encode(), hashlib.sha256).digest()).decode().rstrip("=")


