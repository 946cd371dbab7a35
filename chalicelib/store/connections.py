"""Connections: vendor credentials, stored as KMS ciphertext bound to their account and id.

An authorization-code connection's tokens change under concurrent calls (refresh tokens rotate),
so every token write is conditioned on the `token_version` it read (a person's connect, a new
secret and a revocation move it on whatever it was), and one call at a time holds the refresh
lease (`refresh_owner` until `refresh_until`), taken only over the version it read. The
timeline of a refresh, and why each condition is what it is, is drawn in `token_refresh`:

    take_refresh          IF version = v AND active AND (no lease OR lapsed OR mine)
    save_tokens           IF version = v AND (active OR needs_reconnect)  -> v + 1, active, no lease
    mark_needs_reconnect  IF version = v AND active                       -> needs_reconnect, no lease
    release_refresh       IF the lease is mine                            -> no lease
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pynamodb.exceptions import DoesNotExist

from chalicelib.store.base import key_ok, page, update_if
from chalicelib.store.models import ConnectionItem, RunItem, connection_key
from chalicelib.store.records import (
    ACTIVE,
    NEEDS_RECONNECT,
    REVOKED,
    Call,
    Connection,
    Page,
)

_NO_LEASE = (ConnectionItem.refresh_owner.remove(), ConnectionItem.refresh_until.remove())


def put(connection: Connection) -> None:
    """Store a new connection (its ciphertext already made by the vault)."""
    ConnectionItem(
        account_id=connection.account_id, connection_id=connection.connection_id, vendor=connection.vendor,
        auth_type=connection.auth_type, header_name=connection.header_name or None,
        query_name=connection.query_name or None, oauth=connection.oauth, ciphertext=connection.ciphertext,
        hosts=list(connection.hosts), status=connection.status, created_at=connection.created_at,
        revision=connection.revision, token_version=0,
    ).save(condition=ConnectionItem.connection_id.does_not_exist())


def get(account_id: str, connection_id: str, *, consistent: bool = False) -> Connection | None:
    """A connection of the account, or None; `consistent` to see a token another instance wrote a
    moment ago (twice the read units, so only after a lost token race)."""
    if not key_ok(account_id, connection_id):
        return None
    try:
        return _record(ConnectionItem.get(account_id, connection_id, consistent_read=consistent))
    except DoesNotExist:
        return None


def list_all(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The account's connections."""
    return page(ConnectionItem, account_id, limit=limit, cursor=cursor, record=_record)


def revoke(account_id: str, connection_id: str, now: datetime) -> bool:
    """Mark a connection revoked and drop its tokens; False when it was revoked already."""
    return update_if(
        ConnectionItem(account_id=account_id, connection_id=connection_id),
        [ConnectionItem.status.set(REVOKED), ConnectionItem.revoked_at.set(now),
         ConnectionItem.token_ciphertext.remove(), ConnectionItem.token_expires_at.remove(),
         ConnectionItem.token_issued_at.remove(), ConnectionItem.token_version.add(1), ConnectionItem.auth_state.remove(),
         *_NO_LEASE],
        ConnectionItem.connection_id.exists() & (ConnectionItem.status != REVOKED),
    )


def replace_secret(account_id: str, connection_id: str, *, auth_type: str, ciphertext: bytes,
                   oauth: dict[str, str] | None, status: str, now: datetime) -> bool:
    """Give a connection of the same kind a new secret (and OAuth settings): it becomes `status`
    with no tokens, and its revision moves on so no instance keeps using a token of the old
    secret. False when there is no such connection of that kind."""
    actions: list[Any] = [
        ConnectionItem.ciphertext.set(ciphertext), ConnectionItem.status.set(status),
        ConnectionItem.revision.add(1), ConnectionItem.token_version.add(1),
        ConnectionItem.token_ciphertext.remove(), ConnectionItem.token_expires_at.remove(),
        ConnectionItem.token_issued_at.remove(), ConnectionItem.revoked_at.remove(), ConnectionItem.status_reason.remove(), ConnectionItem.auth_state.remove(),
        *_NO_LEASE,
    ]
    actions.append(ConnectionItem.oauth.set(oauth) if oauth is not None else ConnectionItem.oauth.remove())
    if status == ACTIVE:
        actions.append(ConnectionItem.connected_at.set(now))
    return update_if(ConnectionItem(account_id=account_id, connection_id=connection_id), actions,
                     ConnectionItem.connection_id.exists() & (ConnectionItem.auth_type == auth_type))


def begin_authorization(account_id: str, connection_id: str, *, state_hash: str, session_hash: str,
                        expires_at: datetime) -> bool:
    """Remember the one pending authorization of a connection (a newer Connect replaces it)."""
    return update_if(
        ConnectionItem(account_id=account_id, connection_id=connection_id),
        [ConnectionItem.auth_state.set(state_hash), ConnectionItem.auth_session.set(session_hash),
         ConnectionItem.auth_expires_at.set(expires_at)],
        ConnectionItem.connection_id.exists(),
    )


def take_authorization(account_id: str, connection_id: str, *, state_hash: str, session_hash: str,
                       now: datetime) -> bool:
    """Use up the pending authorization if it is this state, of this session, and unexpired:
    one conditional write, so a state works once however many callbacks race."""
    return update_if(
        ConnectionItem(account_id=account_id, connection_id=connection_id),
        [ConnectionItem.auth_state.remove(), ConnectionItem.auth_session.remove(),
         ConnectionItem.auth_expires_at.remove()],
        (ConnectionItem.auth_state == state_hash) & (ConnectionItem.auth_session == session_hash)
        & (ConnectionItem.auth_expires_at > now) & (ConnectionItem.status != REVOKED),
    )


def connect(account_id: str, connection_id: str, *, token_ciphertext: bytes, expires_at: datetime | None,
            issued_at: datetime | None, now: datetime) -> bool:
    """Store the tokens a person's authorization gave: the connection is active, whatever it was
    (a reconnect in place), and its token version moves on so a refresh of older tokens loses."""
    actions: list[Any] = [
        ConnectionItem.token_ciphertext.set(token_ciphertext), ConnectionItem.token_version.add(1),
        ConnectionItem.status.set(ACTIVE), ConnectionItem.status_reason.remove(), ConnectionItem.revoked_at.remove(),
        ConnectionItem.connected_at.set(now), *_NO_LEASE, *_expiry(expires_at, issued_at),
    ]
    return update_if(ConnectionItem(account_id=account_id, connection_id=connection_id), actions,
                     ConnectionItem.connection_id.exists())


def take_refresh(account_id: str, connection_id: str, *, read_version: int, owner: str, now: datetime,
                 until: datetime) -> bool:
    """Take the refresh lease of an active connection's tokens of `read_version` until `until`:
    False when another call holds an unlapsed lease, or the tokens or status moved on since they
    were read. Taking it again as the same `owner` succeeds (a retried write whose answer was lost)."""
    free = (ConnectionItem.refresh_until.does_not_exist() | (ConnectionItem.refresh_until < now)
            | (ConnectionItem.refresh_owner == owner))
    return update_if(ConnectionItem(account_id=account_id, connection_id=connection_id),
                     [ConnectionItem.refresh_owner.set(owner), ConnectionItem.refresh_until.set(until)],
                     _at_version(read_version) & (ConnectionItem.status == ACTIVE) & free)


def release_refresh(account_id: str, connection_id: str, *, owner: str) -> bool:
    """Give the refresh lease back (its refresh failed for now); False when it is not `owner`'s any more."""
    return update_if(ConnectionItem(account_id=account_id, connection_id=connection_id), list(_NO_LEASE),
                     ConnectionItem.refresh_owner == owner)


def save_tokens(account_id: str, connection_id: str, *, token_ciphertext: bytes, expires_at: datetime | None,
                issued_at: datetime | None, read_version: int) -> bool:
    """Store refreshed tokens over the version they were refreshed from: the connection is active
    and the lease free. Over `needs_reconnect` too: at the same version that mark can only be a
    rotation race (the vendor took this refresh token, so the grant stands). False when a
    revocation, a new secret or a person's connect (each moves the version on) came first."""
    actions: list[Any] = [
        ConnectionItem.token_ciphertext.set(token_ciphertext), ConnectionItem.token_version.set(read_version + 1),
        *_expiry(expires_at, issued_at), ConnectionItem.status.set(ACTIVE), ConnectionItem.status_reason.remove(), *_NO_LEASE,
    ]
    return update_if(ConnectionItem(account_id=account_id, connection_id=connection_id), actions,
                     _at_version(read_version) & ConnectionItem.status.is_in(ACTIVE, NEEDS_RECONNECT))


def mark_needs_reconnect(account_id: str, connection_id: str, *, reason: str, read_version: int | None = None,
                         revision: int | None = None) -> bool:
    """An active connection whose credential the vendor no longer takes needs a person; only if
    nothing changed since it was read (the tokens of `read_version` still current, the secret of
    `revision`): False otherwise."""
    condition = ConnectionItem.status == ACTIVE
    if read_version is not None:
        condition = condition & _at_version(read_version)
    if revision is not None:
        condition = condition & _at_revision(revision)
    return update_if(ConnectionItem(account_id=account_id, connection_id=connection_id),
                     [ConnectionItem.status.set(NEEDS_RECONNECT), ConnectionItem.status_reason.set(reason[:200]),
                      *_NO_LEASE], condition)


def recent_calls(account_id: str, connection_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """The calls through a connection, newest first (one Query of the sparse `by_connection` index)."""
    return page(RunItem, connection_key(account_id, connection_id), index=RunItem.by_connection, limit=limit,
                cursor=cursor, record=_call, scan_index_forward=False)


def _at_version(version: int) -> Any:
    # an item written before token versions existed has none: version 0
    condition = ConnectionItem.token_version == version
    return condition | ConnectionItem.token_version.does_not_exist() if version == 0 else condition


def _at_revision(revision: int) -> Any:
    condition = ConnectionItem.revision == revision
    return condition | ConnectionItem.revision.does_not_exist() if revision == 0 else condition


def _expiry(expires_at: datetime | None, issued_at: datetime | None) -> list[Any]:
    """Set (or remove, when unknown) when the stored access token expires and when it was issued."""
    return [ConnectionItem.token_expires_at.set(expires_at) if expires_at else ConnectionItem.token_expires_at.remove(),
            ConnectionItem.token_issued_at.set(issued_at) if issued_at else ConnectionItem.token_issued_at.remove()]


def _call(item: RunItem) -> Call:
    return Call(run_id=item.run_id, agent_id=item.agent_id, vendor=item.vendor, name=item.name,
                version=int(item.version), status=item.status, error_code=item.error_code,
                dry_run=bool(item.dry_run), created_at=item.created_at, updated_at=item.updated_at)


def _record(item: ConnectionItem) -> Connection:
    return Connection(
        connection_id=item.connection_id, account_id=item.account_id, vendor=item.vendor,
        auth_type=item.auth_type, header_name=item.header_name or "", hosts=tuple(str(host) for host in item.hosts or ()),
        status=item.status, created_at=item.created_at, revoked_at=item.revoked_at,
        ciphertext=bytes(item.ciphertext), query_name=item.query_name or "", oauth=item.oauth,
        revision=int(item.revision or 0), token_ciphertext=bytes(item.token_ciphertext or b""),
        token_expires_at=item.token_expires_at, token_issued_at=item.token_issued_at,
        token_version=int(item.token_version or 0),
        status_reason=item.status_reason, connected_at=item.connected_at, refresh_until=item.refresh_until,
    )
