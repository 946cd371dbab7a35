"""The token endpoint (a code redeemed, a refresh token rotated), revocation (RFC 7009), and a
person's view of an agent's grants. An access token `wst_<agent>_<secret>` lives an hour; a
refresh token `wsr_<agent>_<secret>` lives 30 days from its last use and is rotated on every use.
A code or a rotated-away refresh token presented again revokes the grant, logged and counted."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from chalicelib.base import log
from chalicelib.base.errors import NotFound
from chalicelib.identity import accounts
from chalicelib.identity.accounts import ACCESS_TOKEN_PREFIX, hash_token, s256
from chalicelib.oauth import OAuthError, clients, documents
from chalicelib.oauth.authorization import PKCE, granted_scope
from chalicelib.oauth.discovery import SCOPE
from chalicelib.store import agents as agent_store
from chalicelib.store import oauth as oauth_store
from chalicelib.store.records import AgentState, Grant, OAuthClient

REFRESH_TOKEN_PREFIX = "wsr_"
ACCESS_LIFETIME = timedelta(hours=1)
REFRESH_LIFETIME = timedelta(days=30)


def token(form: dict[str, str], authorization: str | None, now: datetime) -> dict[str, Any]:
    """The token endpoint: redeem a code, or rotate a refresh token."""
    client = _authenticate(form, authorization, now)
    grant_type = form.get("grant_type")
    if grant_type == "authorization_code":
        return _redeem(client, form, now)
    if grant_type == "refresh_token":
        return _refresh(client, form, now)
    raise OAuthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")


def _authenticate(form: dict[str, str], authorization: str | None, now: datetime) -> OAuthClient:
    """The client a token or revocation request comes from: a metadata-document client (its
    client_id a URL, in the form: it is public) without fetching its document, else a registered
    one, authenticated as it registered."""
    client_id = form.get("client_id", "")
    if not authorization and documents.is_document_id(client_id):
        client = documents.public_client(client_id, now)
        if client is None:
            raise OAuthError("invalid_client", "unknown client", status=401)
        return client
    return clients.authenticate(form, authorization, now)


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
    if not PKCE.fullmatch(verifier) or not hmac.compare_digest(s256(verifier), code.code_challenge):
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
    presented_hash = hash_token(presented)
    try:
        state, grant = _grant_of(presented, client)
    except OAuthError:
        spent = oauth_store.spent_refresh(presented_hash, now) if presented.startswith(REFRESH_TOKEN_PREFIX) else None
        if spent is None:
            raise
        agent_id, grant_id = spent  # rotated away generations ago: a copy of it leaked all the same
        raise _replay(agent_id, grant_id, client.client_id, now) from None
    if grant.previous_refresh_hash and hmac.compare_digest(presented_hash, grant.previous_refresh_hash):
        raise _replay(state.agent.agent_id, grant.grant_id, client.client_id, now)
    if not grant.active or state.agent.revoked or not grant.refresh_hash or not hmac.compare_digest(
            presented_hash, grant.refresh_hash) or (grant.refresh_expires_at or now) <= now:
        raise OAuthError("invalid_grant", "the refresh token is not valid")
    if form.get("resource", grant.resource) != grant.resource:
        raise OAuthError("invalid_target", "resource differs from the grant's")
    if form.get("scope") and not granted_scope(form["scope"]):
        raise OAuthError("invalid_scope", f"the scope this server grants is {SCOPE!r}")
    issued = _Tokens.new(state.agent.agent_id)
    if not oauth_store.rotate(state.agent.agent_id, grant.grant_id, presented_hash=grant.refresh_hash,
                              access_hash=hash_token(issued.access), access_expires_at=now + ACCESS_LIFETIME,
                              refresh_hash=hash_token(issued.refresh), refresh_expires_at=now + REFRESH_LIFETIME,
                              now=now, spent_until=now + REFRESH_LIFETIME):
        # another request presented the same token at the same moment: two copies of it exist
        raise _replay(state.agent.agent_id, grant.grant_id, client.client_id, now)
    return issued.answer(grant.scope)


def _replay(agent_id: str, grant_id: str, client_id: str, now: datetime) -> OAuthError:
    """A refresh token presented a second time, however and whenever: the grant is revoked."""
    _replayed("refresh_token", agent_id, grant_id, client_id, now)
    return OAuthError("invalid_grant", "the refresh token was already used; the grant is revoked")


def _replayed(what: str, agent_id: str, grant_id: str, client_id: str, now: datetime) -> None:
    """A code or refresh token came back after use: one of two copies leaked. The grant is revoked,
    logged and counted (`OAuthReplays`, alarmed)."""
    oauth_store.revoke_grant(agent_id, grant_id, now)
    log.event("oauth.replay_revoked", metrics=[log.Metric("OAuthReplays", 1)], replayed=what, agent_id=agent_id,
              grant_id=grant_id, client_id=client_id)


def revoke(form: dict[str, str], authorization: str | None, now: datetime) -> None:
    """RFC 7009: revoke the grant an access or refresh token of this client belongs to. A token that
    is unknown, expired or another client's changes nothing, and is answered the same way."""
    client = _authenticate(form, authorization, now)
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
