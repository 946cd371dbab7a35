"""OAuth as stored: clients and authorization codes in the admin-tokens table (each by a key no
token hash can equal), grants in their agent's partition.

Every token is stored as a hash. Redeeming a code is one transaction: the code marked redeemed
(only if it was not), the grant written (only if new), the agent checked unrevoked; so a code
redeems once, and a grant never outlives a revocation it raced.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime

from pynamodb.exceptions import DoesNotExist

from chalicelib.store.base import ConditionFailed, key_ok, transaction, update_if
from chalicelib.store.models import (
    AGENT_SK,
    OAUTH_CLIENT_PREFIX,
    OAUTH_CODE_PREFIX,
    OAUTH_QUOTA_PREFIX,
    OAUTH_SPENT_PREFIX,
    AgentSettingsItem,
    GrantItem,
    OAuthClientItem,
    OAuthCodeItem,
    OAuthQuotaItem,
    SpentRefreshItem,
    grant_sk,
)
from chalicelib.store.records import AuthorizationCode, Grant, OAuthClient


def put_client(client: OAuthClient, *, expires_at: datetime) -> None:
    """Store a new client; it is dropped at `expires_at` unless a person consents to it first."""
    OAuthClientItem(token_hash=f"{OAUTH_CLIENT_PREFIX}{client.client_id}", client_name=client.client_name,
                    redirect_uris=list(client.redirect_uris), auth_method=client.auth_method,
                    secret_hash=client.secret_hash, client_uri=client.client_uri, created_at=client.created_at,
                    ttl=expires_at).save(condition=OAuthClientItem.token_hash.does_not_exist())


def count_up(counter: str, *, limit: int, expires_at: datetime) -> bool:
    """Count one more against `counter` (one conditional UpdateItem, which makes the counter at its
    first count); False, and nothing written, when it has counted `limit` already. A retry after a
    lost answer may count twice: a quota errs towards refusing, never towards letting more in."""
    if limit <= 0:
        return False
    return update_if(OAuthQuotaItem(token_hash=f"{OAUTH_QUOTA_PREFIX}{counter}"),
                     [OAuthQuotaItem.used.add(1), OAuthQuotaItem.ttl.set(expires_at)],
                     OAuthQuotaItem.used.does_not_exist() | (OAuthQuotaItem.used < limit))


def get_client(client_id: str, now: datetime) -> OAuthClient | None:
    """A registered client (None: unknown, or past its TTL, which DynamoDB deletes only later)."""
    if not key_ok(client_id):
        return None
    try:
        item = OAuthClientItem.get(f"{OAUTH_CLIENT_PREFIX}{client_id}", consistent_read=True)
    except DoesNotExist:
        return None
    if item.ttl is not None and item.ttl <= now:
        return None
    return OAuthClient(client_id=client_id, client_name=item.client_name, redirect_uris=tuple(item.redirect_uris),
                       auth_method=item.auth_method, created_at=item.created_at, secret_hash=item.secret_hash,
                       client_uri=item.client_uri)


def keep_client(client_id: str) -> None:
    """A person consented to the client: it no longer expires."""
    update_if(OAuthClientItem(token_hash=f"{OAUTH_CLIENT_PREFIX}{client_id}"), [OAuthClientItem.ttl.remove()],
              OAuthClientItem.token_hash.exists())


def put_code(code_hash: str, code: AuthorizationCode, *, forget_at: datetime) -> None:
    """Store a consent for redemption; DynamoDB deletes it some time after `forget_at`."""
    OAuthCodeItem(token_hash=f"{OAUTH_CODE_PREFIX}{code_hash}", ttl=forget_at, **asdict(code)).save(
        condition=OAuthCodeItem.token_hash.does_not_exist())


def get_code(code_hash: str) -> AuthorizationCode | None:
    """The stored consent a code stands for, redeemed or not."""
    try:
        item = OAuthCodeItem.get(f"{OAUTH_CODE_PREFIX}{code_hash}", consistent_read=True)
    except DoesNotExist:
        return None
    return AuthorizationCode(
        client_id=item.client_id, redirect_uri=item.redirect_uri, code_challenge=item.code_challenge,
        resource=item.resource, scope=item.scope, account_id=item.account_id, agent_id=item.agent_id,
        grant_id=item.grant_id, consented_by=item.consented_by, expires_at=item.expires_at,
        redeemed_at=item.redeemed_at)


def redeem(code_hash: str, code: AuthorizationCode, grant: Grant, now: datetime) -> bool:
    """Mark the code redeemed and write its grant, atomically; False (nothing written) when the code
    was redeemed meanwhile or the agent was revoked."""
    code_item = OAuthCodeItem(token_hash=f"{OAUTH_CODE_PREFIX}{code_hash}")
    try:
        with transaction() as write:
            write.update(code_item, actions=[OAuthCodeItem.redeemed_at.set(now)],
                         condition=OAuthCodeItem.token_hash.exists() & OAuthCodeItem.redeemed_at.does_not_exist())
            write.save(_grant_item(code.agent_id, grant), condition=GrantItem.sk.does_not_exist())
            write.condition_check(AgentSettingsItem, code.agent_id, AGENT_SK,
                                  condition=AgentSettingsItem.revoked_at.does_not_exist())
    except ConditionFailed:
        return False
    return True


def rotate(agent_id: str, grant_id: str, *, presented_hash: str, access_hash: str, access_expires_at: datetime,
           refresh_hash: str, refresh_expires_at: datetime, now: datetime, spent_until: datetime) -> bool:
    """Replace the grant's tokens, if the refresh token presented is still its current one and the
    grant is not revoked; the presented one becomes the previous, and is remembered as spent until
    `spent_until` (its reuse revokes the grant). One transaction: False (nothing written) when the
    token was rotated meanwhile, by another request presenting it too, or the grant was revoked."""
    try:
        with transaction() as write:
            write.update(
                GrantItem(agent_id=agent_id, sk=grant_sk(grant_id)),
                actions=[GrantItem.access_hash.set(access_hash), GrantItem.access_expires_at.set(access_expires_at),
                         GrantItem.refresh_hash.set(refresh_hash),
                         GrantItem.refresh_expires_at.set(refresh_expires_at),
                         GrantItem.previous_refresh_hash.set(presented_hash), GrantItem.refreshed_at.set(now)],
                condition=(GrantItem.refresh_hash == presented_hash) & GrantItem.revoked_at.does_not_exist())
            write.save(SpentRefreshItem(token_hash=f"{OAUTH_SPENT_PREFIX}{presented_hash}", agent_id=agent_id,
                                        grant_id=grant_id, ttl=spent_until),
                       condition=SpentRefreshItem.token_hash.does_not_exist())
    except ConditionFailed:
        return False
    return True


def spent_refresh(token_hash: str, now: datetime) -> tuple[str, str] | None:
    """(agent id, grant id) of a refresh token that was rotated away; None for any other."""
    try:
        item = SpentRefreshItem.get(f"{OAUTH_SPENT_PREFIX}{token_hash}", consistent_read=True)
    except DoesNotExist:
        return None
    return (item.agent_id, item.grant_id) if item.ttl > now else None


def revoke_grant(agent_id: str, grant_id: str, now: datetime) -> bool:
    """Stop the grant's tokens for good (revoking again keeps the first time); False when there is
    no such grant."""
    if not key_ok(agent_id, grant_sk(grant_id)):
        return False
    return update_if(
        GrantItem(agent_id=agent_id, sk=grant_sk(grant_id)),
        [GrantItem.revoked_at.set(GrantItem.revoked_at | now), GrantItem.access_hash.remove(),
         GrantItem.refresh_hash.remove(), GrantItem.previous_refresh_hash.remove()],
        GrantItem.sk.exists())


def _grant_item(agent_id: str, grant: Grant) -> GrantItem:
    return GrantItem(
        agent_id=agent_id, sk=grant_sk(grant.grant_id), client_id=grant.client_id, client_name=grant.client_name,
        scope=grant.scope, resource=grant.resource, created_at=grant.created_at, consented_by=grant.consented_by,
        access_hash=grant.access_hash, access_expires_at=grant.access_expires_at, refresh_hash=grant.refresh_hash,
        refresh_expires_at=grant.refresh_expires_at)
